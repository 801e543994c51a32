"""The drafter grid of issue 27 for one target (``experiments.studies.drafter_grid``).

    taskset -c 0 python scripts/drafter_grid.py --arch gdn --deadline 13:15 &
    taskset -c 1 python scripts/drafter_grid.py --arch mla --deadline 13:15 &

One thread each; resumable (a stored point is skipped, a half-trained one resumes). The
references are the shipped drafter (share 0.5, 3000 steps, soft labels) and the previous
release's (rollouts only, 3000 steps, hard labels; git 60352f6, in the published layout).
"""
import argparse
import datetime
import subprocess
from pathlib import Path

import torch

from ddtree_lab.common import DATA_DIR
from ddtree_lab.experiments.studies.drafter_grid import RUNS, parse_point, run_grid
from ddtree_lab.train.checkpoints import ckpt_path

PREVIOUS = "60352f6"
POINTS = "0x3000,0.25x3000,0.25x6000,0.5x6000,0x6000"


def previous_drafter(arch: str) -> Path:
    """The previous release's drafter, written from git into data/runs/previous/."""
    out = RUNS / "previous" / f"{arch}-drafter"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors", "manifest.json"):
        blob = subprocess.run(["git", "show", f"{PREVIOUS}:data/checkpoints/{arch}-drafter/{name}"],
                              capture_output=True, check=True, cwd=DATA_DIR.parent).stdout
        (out / name).write_bytes(blob)
    return out


def deadline_of(text: str | None) -> float | None:
    if text is None:
        return None
    now = datetime.datetime.now()
    h, m = map(int, text.split(":"))
    return now.replace(hour=h, minute=m, second=0, microsecond=0).timestamp()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, choices=("gdn", "mla"))
    ap.add_argument("--points", default=POINTS, help="SHARExSTEPS[m|h][@LAYERS], comma-separated (m: mixed, h: hard labels; @5: a 5-layer drafter)")
    ap.add_argument("--deadline", help="HH:MM (today): a point that would train past it is left for later")
    args = ap.parse_args()
    torch.set_num_threads(1)
    refs = {"shipped": (ckpt_path(args.arch, "drafter"), 0.5, 3000, "soft"),
            "previous": (previous_drafter(args.arch), 0.0, 3000, "hard")}
    grid = run_grid(args.arch, [parse_point(p) for p in args.points.split(",")], refs,
                    deadline=deadline_of(args.deadline))
    print(grid.to_string())


if __name__ == "__main__":
    main()
