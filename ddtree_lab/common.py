"""The two things every layer shares: where the repository is, and one stable hash."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent   # the repository (package folder's parent)
DATA_DIR = ROOT / "data"
RESULTS_DIR = DATA_DIR / "results"
FIGURES_DIR = ROOT / "figures"


def stable_hash(obj, length: int = 16) -> str:
    """sha256 hex prefix of ``obj`` (bytes, str, or anything JSON-serialisable with sorted keys)."""
    if isinstance(obj, str):
        obj = obj.encode()
    if not isinstance(obj, bytes):
        obj = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(obj).hexdigest()[:length]
