"""What the stored results mean: one version number, bumped by a person with a dated line.

A stored row is keyed by the models' digests, the generation spec (its config), the prompt
and ``SEMANTICS`` (``experiments.plumbing.results.row_key``); never by the bytes of the
source. A comment, a rename, a refactor or a faster path that leaves every token where it was
changes nothing stored. A change that moves a result (a token, an acceptance length, a tree
size, an entropy) must bump ``SEMANTICS`` here and recompute the stores it moved
(``ddtree-lab recompute NAME``). The golden check in the fast lane
(``app/tests/test_golden.py``; ``ddtree-lab status``) recomputes a fixed sample of every store
and fails, naming the stores and the command, when a change moved a result without a bump.
"""
from __future__ import annotations

SEMANTICS = 1

# (date, version, what changed and which stores it moved): newest last; a bump appends a line
CHANGES = (
    ("2026-12-07", 1, "results keyed by meaning (models, spec, prompt, this version), no longer by a hash of "
                      "core's source; every store moved from code a4e81e3463096ec6 (measured at 4163d1d) by "
                      "scripts/migrate_semantics.py, nothing recomputed"),
)


def check_changes(changes=CHANGES, current: int = SEMANTICS) -> None:
    """Raise ValueError unless ``changes`` is dated, ends at ``current`` and counts 1, 2, ... in order."""
    versions = [v for _, v, _ in changes]
    if versions != list(range(1, len(versions) + 1)) or versions[-1] != current:
        raise ValueError(f"CHANGES must count 1..SEMANTICS ({current}) in order, one dated line a bump; got {versions}")
