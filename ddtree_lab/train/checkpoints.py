"""Shipped checkpoints: HF directories under ``data/checkpoints/`` with a manifest.

Each directory holds the weights (safetensors, bf16 to keep the repo small), its config and
``manifest.json`` (sha256 of every file, the training config, the corpus manifest, final
validation loss, train time). Loading checks every hash: a missing file names the command
that rebuilds it, a corrupted file is named.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from ..common import DATA_DIR

CKPT_DIR = DATA_DIR / "checkpoints"
REBUILD = {"target": "ddtree-lab train-target --arch {arch}",
           "drafter": "ddtree-lab train-drafter --arch {arch}",
           "drafter2": "ddtree-lab train-drafter2 --arch {arch}"}


CURVES_DIR = DATA_DIR / "results" / "training"


def store_curve(runs_dir: Path, out: Path, arch: str, kind: str) -> Path | None:
    """Copy a run's ``log.csv`` (loss curve) to ``data/results/training/{arch}-{kind}.csv``
    when ``out`` is the shipped checkpoint's place (runs into other folders keep theirs)."""
    log = Path(runs_dir) / "log.csv"
    if Path(out).resolve() != ckpt_path(arch, kind).resolve() or not log.is_file():
        return None
    CURVES_DIR.mkdir(parents=True, exist_ok=True)
    dest = CURVES_DIR / f"{arch}-{kind}.csv"
    dest.write_bytes(log.read_bytes())
    return dest


def ckpt_path(arch: str, kind: str, root: Path = CKPT_DIR) -> Path:
    """data/checkpoints/{arch}-{kind}, kind 'target', 'drafter' or 'drafter2' (DFlash 2)."""
    return Path(root) / f"{arch}-{kind}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def weights_digest(module, config: dict) -> str:
    """sha256 of ``config`` (JSON) and every tensor of ``module.state_dict()`` in name order:
    identifies a model's weights exactly, wherever its files live."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def write_manifest(directory: Path, **info) -> dict:
    """Hash every file in ``directory`` (except the manifest) and store it with ``info``."""
    directory = Path(directory)
    files = {p.name: sha256_file(p) for p in sorted(directory.iterdir())
             if p.is_file() and p.name != "manifest.json"}
    man = {"files": files, **info}
    (directory / "manifest.json").write_text(json.dumps(man, indent=1, default=str))
    return man


def check_manifest(directory: Path, rebuild: str = "") -> dict:
    """The manifest of a checkpoint directory, after checking every file's sha256."""
    directory = Path(directory)
    hint = f"; rebuild it with `{rebuild}`" if rebuild else ""
    man_path = directory / "manifest.json"
    if not man_path.is_file():
        raise FileNotFoundError(f"{man_path} is missing{hint}")
    man = json.loads(man_path.read_text())
    for name, digest in man["files"].items():
        p = directory / name
        if not p.is_file():
            raise FileNotFoundError(f"{p} is missing{hint}")
        if sha256_file(p) != digest:
            raise ValueError(f"{p} is corrupted (sha256 does not match manifest.json){hint}")
    return man
