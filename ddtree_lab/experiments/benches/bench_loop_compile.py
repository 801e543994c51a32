"""The compiled decoding loop against the eager one (``GenerationSpec.compile``), on the shipped
pairs: AR, DFlash and DDTree 16 / 64 on the same HumanEval prompts, eager then compiled per
prompt (``studies.compiled_loop``), one thread, after every graph is compiled (inductor's on-disk cache of
earlier runs in use: the compile seconds are a warm machine's). Each kind is
also compared with AR of its own kind (eager over eager, compiled over compiled).
Writes data/results/loop_compile.csv (one row per target, config, prompt and kind, with the
load average) and prints ``loop_summary``. ``ddtree-lab recompute loop_compile`` runs it (alone: a timing).

    python scripts/bench_loop_compile.py [--prompts 8] [--archs gdn,mla]
"""
from __future__ import annotations

import argparse

import pandas as pd
import torch

from ddtree_lab.train.pair import load_pair
from ddtree_lab.experiments.plumbing.measure import print_row
from ddtree_lab.experiments.studies.compiled_loop import STORE, loop_summary, run_compiled_loop


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8, help="HumanEval prompts (every 164 // n-th), >= 6")
    ap.add_argument("--archs", default="gdn,mla", help="comma-separated targets of the shipped pairs")
    return ap


def run(prompts: int = 8, archs: str = "gdn,mla") -> None:
    if prompts < 6:
        raise ValueError(f"--prompts must be >= 6 (a 95% interval needs 6 pairs), got {prompts}")
    torch.set_num_threads(1)
    rows = []
    for arch in archs.split(","):
        pair = load_pair(arch)
        ids = {p: pair.prompt_ids(p) for p in range(0, 164, 164 // prompts)[:prompts]}
        rows += run_compiled_loop(pair, arch, ids, progress=print_row)
    frame = pd.DataFrame(rows)
    frame.to_csv(STORE, index=False)
    print(loop_summary(frame).to_string(index=False))
    print(f"wrote {STORE}")


def main() -> None:
    run(**vars(parser().parse_args()))


if __name__ == "__main__":
    main()
