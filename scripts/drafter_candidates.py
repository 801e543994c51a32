"""The drafters a grid picks (issue 27), made ready to ship: the DFlash drafter of the picked
grid point and a DFlash 2 drafter trained from it on the same data (the point's real-code
share and labels), under data/candidates/ with their loss curves; ``--ship`` then copies them
over the shipped checkpoints (data/checkpoints/) and curves (data/results/training/), after
which every store is recomputed (``ddtree-lab recompute --all``).

    taskset -c 0 python scripts/drafter_candidates.py --arch gdn            # the ship rule's pick
    taskset -c 0 python scripts/drafter_candidates.py --arch gdn --point share0.25-steps6000-mixed
    python scripts/drafter_candidates.py --arch gdn --ship
"""
import argparse
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_lab.common import DATA_DIR  # noqa: E402
from ddtree_lab.experiments.studies.drafter_grid import RUNS, load_grid, point_dir, point_of, ship_rule  # noqa: E402
from ddtree_lab.train.checkpoints import CURVES_DIR, ckpt_path, check_manifest  # noqa: E402
from ddtree_lab.train.drafters import load_drafter, train_drafter2  # noqa: E402
from ddtree_lab.train.pair import load_pair  # noqa: E402

CANDIDATES = DATA_DIR / "candidates"


def copy_dir(src: Path, dest: Path) -> None:
    """``dest`` becomes a copy of ``src`` (files only), its manifest's hashes checked."""
    check_manifest(src)
    dest.mkdir(parents=True, exist_ok=True)
    for f in dest.glob("*"):
        f.unlink()
    for f in src.glob("*"):
        shutil.copy2(f, dest / f.name)
    check_manifest(dest)


def make(arch: str, name: str | None) -> None:
    grid = load_grid()
    picks = ship_rule(grid).set_index("arch")
    name = name or picks.loc[arch, "point"]
    rows = grid[(grid.arch == arch) & (grid.point == name)]
    if rows.empty:
        raise SystemExit(f"--point must be a stored point of {arch}: {sorted(grid[grid.arch == arch].point)}")
    row = rows.iloc[0]
    print(f"{arch}: candidate {name} (the ship rule picks {picks.loc[arch, 'point']}; it meets today's "
          f"teacher-forced floor: {bool(picks.loc[arch, 'meets_floor'])})")
    if row.source == "shipped":
        print("the shipped drafter stays: nothing to make")
        return
    point = point_of(row)
    source = point_dir(arch, point) if row.source == "trained" else RUNS / "previous" / f"{arch}-drafter"
    copy_dir(source / "drafter" if row.source == "trained" else source, CANDIDATES / f"{arch}-drafter")
    if row.source == "trained":
        shutil.copy2(source / "run" / "log.csv", CANDIDATES / f"{arch}-drafter.csv")
    pair = load_pair(arch)
    drafter = load_drafter(CANDIDATES / f"{arch}-drafter", pair.target, rebuild="")
    runs = RUNS / f"{arch}-candidate-drafter2"
    train_drafter2(arch, target=pair.target, drafter=drafter, out=CANDIDATES / f"{arch}-drafter2", runs_dir=runs,
                   corpus_share=point.share, labels=point.labels)
    shutil.copy2(runs / "log.csv", CANDIDATES / f"{arch}-drafter2.csv")


def ship(arch: str) -> None:
    for kind in ("drafter", "drafter2"):
        copy_dir(CANDIDATES / f"{arch}-{kind}", ckpt_path(arch, kind))
        shutil.copy2(CANDIDATES / f"{arch}-{kind}.csv", CURVES_DIR / f"{arch}-{kind}.csv")
        print(f"shipped {arch}-{kind}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, choices=("gdn", "mla"))
    ap.add_argument("--point", default=None, help="a grid point's name (default: the ship rule's pick)")
    ap.add_argument("--ship", action="store_true", help="copy the candidates over the shipped checkpoints")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.ship:
        ship(args.arch)
    else:
        make(args.arch, args.point)


if __name__ == "__main__":
    main()
