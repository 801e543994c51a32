"""Exactness sweep and verify cost at the published layer widths (issue 12).

Builds a few full-width layers (``core.full_size`` presets, random init), saves them with
``save_pretrained`` into a temporary directory and loads them back with ``load_target`` as a
real checkpoint, then:

    python scripts/full_size_check.py exact   # every mode vs the stock forward, budgets to 256,
                                              # prefixes across the GDN chunk; commit rounds
    python scripts/full_size_check.py cost    # verify ms 1..256 per mode + measured memory,
                                              # CSV + figure
Options: --device cuda --dtype bfloat16 (the GPU run, scripts/gpu_check.sh), --tiny (the toy
presets through the same code, seconds on a CPU), --out DIR (default data/results/full_size).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_lab.experiments.studies.full_size import build_full_size, full_size_config, save_checkpoint  # noqa: E402
from ddtree_lab.core.spec import gdn_mode  # noqa: E402
from ddtree_lab.core.models import build_target, load_target  # noqa: E402
from ddtree_lab.experiments.studies import full_size_cost as fsc# noqa: E402

# "a few layers" that fit this 24 GiB CPU machine in float32 (3.1 GB and 2.2 GB of weights)
CPU_SIZES = {"qwen3.5-27b": dict(num_layers=2), "kimi-k2.6": dict(num_layers=1, dense_layers=0, num_experts=9)}
GPU_SIZES = {"qwen3.5-27b": dict(num_layers=4), "kimi-k2.6": dict(num_layers=2, num_experts=16)}
TINY = {"qwen3.5-27b": "gdn-toy", "kimi-k2.6": "mla-toy"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def loaded(name: str, args, tmp: str):
    """Build, save_pretrained, free, and load back through load_target. The checkpoint goes to
    ``tmp``, or to ``args.checkpoint``/name where a previous run (another dtype) left it."""
    if args.tiny:
        config = {"preset": TINY[name]}
    else:
        sizes = (GPU_SIZES if args.device == "cuda" else CPU_SIZES)[name] | {"vocab_size": args.vocab}
        config = asdict(full_size_config(name, **sizes))
    path = Path(args.checkpoint) / name if args.checkpoint else Path(tmp)
    if not (path / "config.json").is_file():
        save_checkpoint(build_target(TINY[name]) if args.tiny else build_full_size(name, **sizes), path)
    return load_target(path, dtype=DTYPES[args.dtype], device=args.device), config


def environment(args) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": args.device,
           "dtype": args.dtype, "tiny": args.tiny, "threads": torch.get_num_threads()}
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    for mod in ("fla", "causal_conv1d", "transformers", "accelerate"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # an optional kernel not installed: recorded, not fatal
            env[mod] = None
    return env


def exact_cases(args) -> list[tuple]:
    """(budget, tree kind, prefix length): the CPU default keeps the oracle's per-leaf forwards
    affordable (bushy trees at budget 64 only); --budgets gives the full product."""
    if args.budgets is None:
        return [(1, "deep", 80), (16, "bushy", 80), (64, "deep", 80), (64, "bushy", 80), (64, "deep", 150),
                (256, "deep", 80)]
    return [(b, kind, p) for b in args.budgets for kind in (fsc.TREE_KINDS if b <= 64 else ("deep",))
            for p in args.prefixes]


def run_exact(args) -> None:
    rows, commits = [], []
    for name in args.presets:
        with tempfile.TemporaryDirectory() as tmp:
            model, config = loaded(name, args, tmp)
            for budget, kind, prefix_len in exact_cases(args):
                start = time.time()
                row = {"preset": name, **fsc.exactness_row(model, budget, kind, prefix_len)}
                rows.append(row | {"seconds": round(time.time() - start, 1)})
                print(rows[-1], flush=True)
            for mode in fsc.modes_of(model):
                if gdn_mode(mode).exact:
                    commits.append({"preset": name, **fsc.commit_row(model, mode)})
                    print(commits[-1], flush=True)
            del model
    table = pd.DataFrame(rows)
    table.to_csv(args.out / f"exactness{args.tag}.csv", index=False)
    summary = {"environment": environment(args), "config": config,
               "max_rel_err": {c.removeprefix("rel_err_"): float(table[c].max()) for c in table if c.startswith("rel_err")},
               "oracle_max_rel_err": float(table["oracle_rel_err"].max()), "commit": commits}
    (args.out / f"exactness{args.tag}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


def run_cost(args) -> None:
    name = "qwen3.5-27b"
    with tempfile.TemporaryDirectory() as tmp:
        model, config = loaded(name, args, tmp)
        rows = fsc.cost_rows(model, args.budgets, prefix_len=args.cost_prefix, repeats=args.repeats)
    table = pd.DataFrame(rows)
    table.to_csv(args.out / f"gdn_cost{args.tag}.csv", index=False)
    (args.out / f"gdn_cost{args.tag}.json").write_text(json.dumps({"environment": environment(args),
                                                                    "config": config}, indent=1))
    title = f"{'toy' if args.tiny else 'Qwen3.5-27B-width'} GDN hybrid, {args.device} {args.dtype}"
    fsc.plot_cost(table, args.out / f"gdn_cost{args.tag}.png", title)
    if not args.tiny and args.device == "cpu" and not args.tag:  # the figure of docs/results.md
        fsc.plot_cost(table, ROOT / "figures" / "full_size_verify_cost.png", title)
    print(table.to_string())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("exact", "cost"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--tiny", action="store_true", help="toy presets through the same code (a CPU smoke run)")
    p.add_argument("--presets", nargs="+", default=list(CPU_SIZES), choices=list(CPU_SIZES))
    p.add_argument("--budgets", nargs="+", type=int)
    p.add_argument("--prefixes", nargs="+", type=int, default=[80, 150])
    p.add_argument("--cost-prefix", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint", help="keep the saved checkpoints here and reuse them (default: a temp dir)")
    p.add_argument("--out", type=Path, default=ROOT / "data" / "results" / "full_size")
    p.add_argument("--tag", default="", help="suffix of the output files, e.g. -cuda-bf16")
    args = p.parse_args(argv)
    if args.budgets is None and args.what == "cost":
        args.budgets = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 exactness means float32 matmuls
    torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    (run_exact if args.what == "exact" else run_cost)(args)


if __name__ == "__main__":
    main()
