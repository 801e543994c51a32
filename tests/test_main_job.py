"""The main job is deterministic: rerunning every notebook on the committed stores only
redraws, and leaves the checkout as it was (figures included). When it does rewrite a tracked
file (the stores are stale: a change moved results and its stores were not recomputed: ``ddtree-lab recompute NAME``), the
test puts the committed files back before it fails, so a failing run loses nothing and leaves
no half-written store behind."""
import shutil
import subprocess

import pytest

from ddtree_lab.common import ROOT

TRACKED = ["figures", "data", "README.md", "docs", "notebooks"]  # docs/results.md: rendered like the README


def _status() -> str:
    out = subprocess.run(["git", "status", "--porcelain", "--", *TRACKED], cwd=ROOT, capture_output=True, text=True)
    return out.stdout


@pytest.mark.slow
@pytest.mark.xdist_group("checkout")  # never beside the browser test, which checks the same files (test.sh: --dist loadgroup)
@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_rerunning_the_main_job_on_the_committed_store_changes_no_tracked_file():
    before = _status()
    if before:
        pytest.skip(f"the checkout has uncommitted changes under {TRACKED}; commit them first:\n{before}")
    from ddtree_lab.app.notebooks import run_all
    try:
        run_all(smoke=False)
    finally:
        after = _status()
        if after:  # stale stores (code changed since the last recompute) were recomputed into the checkout:
            _restore()  # put the committed files back (the checkout was clean before), then fail
    assert after == "", f"the main job rewrote tracked files (restored to the commit):\n{after}"


def _restore() -> None:
    """The committed state of ``TRACKED``: modified files checked out, new files removed."""
    subprocess.run(["git", "checkout", "--", *TRACKED], cwd=ROOT, check=True)
    subprocess.run(["git", "clean", "-fdq", "--", *TRACKED], cwd=ROOT, check=True)
