#!/usr/bin/env bash
# Debian's chromium + chromium-driver for the end-to-end JupyterLab test (no browser download
# by any framework: those fail offline). Skips quietly where it cannot install.
set -u
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_browser: not root or no apt-get; the browser test will be skipped"; exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null \
  || echo "install_browser: apt-get failed; the browser test will be skipped"
