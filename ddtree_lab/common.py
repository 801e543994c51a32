"""What every layer shares: where the repository is, one stable hash, and the line that
estimates the rest of a long phase."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent   # the repository (package folder's parent)
DATA_DIR = ROOT / "data"
RESULTS_DIR = DATA_DIR / "results"
FIGURES_DIR = ROOT / "figures"   # committed: written only by the main job at defaults
MAIN_JOB_ENV = "DDTREE_MAIN_JOB"   # "1" in the main job's kernels (``app.notebooks.run_all``): figures go to FIGURES_DIR


def stable_hash(obj, length: int = 16) -> str:
    """sha256 hex prefix of ``obj`` (bytes, str, or anything JSON-serialisable with sorted keys)."""
    if isinstance(obj, str):
        obj = obj.encode()
    if not isinstance(obj, bytes):
        obj = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(obj).hexdigest()[:length]


def pace_line(what: str, done: int, total: int, seconds: float, unit: str = "") -> str:
    """The estimate a long phase prints once its first part is done: 'rollouts: 32 of 160
    prompts in 4 s; about 16 s more at this pace'."""
    left = seconds / max(done, 1) * (total - done)
    more = f"{left / 60:.1f} min" if left >= 90 else f"{left:.0f} s"
    return f"{what}: {done} of {total}{' ' + unit if unit else ''} in {seconds:.0f} s; about {more} more at this pace"
