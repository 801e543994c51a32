"""Tree verification under transformers' own tensor parallelism (issue 12, item 5).

    torchrun --nproc-per-node 2 scripts/tp_verify.py [--preset qwen3.5-27b|kimi-k2.6]

Each rank loads the same checkpoint with ``load_target(path,
distributed_config=DistributedConfig(tp_plan="auto"))`` (transformers 5.23's spelling of
``tp_plan="auto"``: the class's ``base_model_tp_plan``, gloo on the CPU: no parallel runtime of this lab's own), runs
``prefill`` + ``verify`` for every budget, and rank 0 checks the tree logits against a
single-process load of the same checkpoint. The share of a verify spent in collectives is
measured by timing every ``torch.distributed`` collective the TP hooks call (all_reduce,
all_gather*, reduce_scatter*, broadcast) and, for DTensor redistributions, the functional
collectives' waits; it is reported per budget as collective ms / verify ms (median of repeats).
Writes data/results/full_size/tp_<preset>.csv and .json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_lab.experiments.studies.full_size import build_full_size, relative_error, save_checkpoint  # noqa: E402
from ddtree_lab.core.harness import timed_calls  # noqa: E402
from ddtree_lab.core.models import load_target  # noqa: E402
from ddtree_lab.core.verify import GDN_MODES, prefill, verify  # noqa: E402
from ddtree_lab.experiments.studies.full_size_cost import modes_of, random_prefix  # noqa: E402
from ddtree_lab.experiments.plumbing.measure import random_tree  # noqa: E402

# the suite's sizes (published attention / GDN / MLA shapes, MLP widths cut): two copies on
# each of two ranks plus the single-process reference fit this 24 GiB machine
SIZES = {"qwen3.5-27b": dict(num_layers=2, mlp_width=1024, vocab_size=1024),
         "kimi-k2.6": dict(num_layers=2, mlp_width=1024, expert_width=512, num_experts=16, vocab_size=1024)}
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
               "all_to_all_single")


def collectives():
    """(module, name, key) of every torch.distributed collective (and funcol wait): what
    ``harness.timed_calls`` times into spent["comms"]."""
    from torch.distributed import _functional_collectives as funcol
    return ([(dist, n, "comms") for n in COLLECTIVES if hasattr(dist, n)]
            + [(funcol, n, "comms") for n in ("wait_tensor",) if hasattr(funcol, n)])


def tp_rows(model, budgets, prefix_len: int, repeats: int, mode: str) -> tuple[list[dict], dict]:
    """(rows of verify ms / collective ms per budget, {budget: tree logits})."""
    V = model.config.vocab_size
    cache, _ = prefill(model, random_prefix(V, prefix_len))
    rows, logits, spent = [], {}, {"comms": 0.0}
    with timed_calls(collectives(), spent):
        for b in budgets:
            tree, totals, comms = random_tree(V, b), [], []
            for r in range(repeats + 1):
                dist.barrier()
                spent["comms"], start = 0.0, time.perf_counter()
                out = verify(model, cache.snapshot(), tree, mode).logits
                totals += [1e3 * (time.perf_counter() - start)] if r else []
                comms += [spent["comms"]] if r else []
            logits[b] = out.float()
            rows.append({"budget": b, "mode": mode, "verify_ms": statistics.median(totals),
                         "collective_ms": statistics.median(comms),
                         "collective_share": statistics.median(c / t for c, t in zip(comms, totals))})
    return rows, logits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="qwen3.5-27b", choices=list(SIZES))
    p.add_argument("--budgets", nargs="+", type=int, default=[1, 16, 64, 256])
    p.add_argument("--prefix", type=int, default=80)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--checkpoint", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ddtree_tp_ckpt")
    p.add_argument("--out", type=Path, default=ROOT / "data" / "results" / "full_size")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = args.checkpoint / args.preset
    if rank == 0 and not (path / "config.json").is_file():
        save_checkpoint(build_full_size(args.preset, **SIZES[args.preset]), path)
    dist.barrier()
    from transformers import DistributedConfig
    model = load_target(path, distributed_config=DistributedConfig(tp_plan="auto"))
    mode = "wy"
    rows, logits = tp_rows(model, args.budgets, args.prefix, args.repeats, mode)
    if rank == 0:
        del model
        single = load_target(path)
        cache, _ = prefill(single, random_prefix(single.config.vocab_size, args.prefix))
        for row in rows:
            ref = verify(single, cache.snapshot(), random_tree(single.config.vocab_size, row["budget"]), mode).logits
            row["rel_err_vs_single"] = relative_error(ref, logits[row["budget"]])
            row["world_size"] = world
            print(row, flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        import pandas as pd
        pd.DataFrame(rows).to_csv(args.out / f"tp_{args.preset}.csv", index=False)
        (args.out / f"tp_{args.preset}.json").write_text(json.dumps(
            {"preset": args.preset, "sizes": SIZES[args.preset], "world_size": world, "backend": "gloo",
             "tp_plan": "auto", "gdn_modes": list(modes_of(single)) if mode in GDN_MODES else [], "rows": rows},
            indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
