"""A compiled verify against the eager one (issue 17 item 5).

``verify.tree_forward`` is a pure function of (model, ``TreeBatch``): no module is patched per
call (the GDN layers are routed once, ``verify.route_recurrent``), so ``torch.compile`` can
capture it. On the real-size random-init targets (``build_target("gdn" | "mla")``, float32,
one thread), a committed prefix of ``--prefix`` random tokens and ``measure.random_tree``
trees of each budget, for each budget (its own static shape, ``dynamic=False``); a
mixture-of-experts target runs its experts as grouped matmuls in both (``verify.loop_ready``, as
in the compiled loop: the eager experts loop breaks the graph at every MoE layer):

- ``compile_s``: seconds of the first compiled verify (tracing, graph capture, inductor's C++
  codegen and build; inductor's on-disk cache of earlier runs is used when it holds the graph,
  so a warm machine's figure);
- ``eager_ms`` / ``compiled_ms``: median ms of ``--repeats`` verifies each, interleaved (one
  pair per repeat); ``compiled/eager`` with its 95% interval (``spread.ratio_columns``);
- ``max_rel_err``: max |compiled - eager| / max |eager| over the logits (not bit-identical:
  inductor fuses and reorders);
- ``graph_breaks``: dynamo's count for this budget (0: one graph).

``--mode reduce-overhead`` (CUDA graphs) is what ``scripts/gpu_check.sh`` adds on a GPU.
Results -> data/results/bench_compile.csv.

    PYTHONPATH=. taskset -c 0 python scripts/bench_compile.py [--quick]
"""
from __future__ import annotations

import argparse

import pandas as pd
import torch
from torch._dynamo.utils import counters

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.plumbing.results import write_timing_table
from ddtree_lab.core.verify import loop_ready
from ddtree_lab.core.models import build_target
from ddtree_lab.core.verify import prefill, tree_forward, verify_batch
from ddtree_lab.experiments.plumbing.spread import ratio_columns
from ddtree_lab.experiments.plumbing.measure import random_prefix, random_tree, timed

OUT = RESULTS_DIR / "bench_compile.csv"
BUDGETS = (1, 4, 16, 64, 256)


def budget_row(model, cache, budget: int, repeats: int, mode: str, device) -> dict:
    """Compile time, eager vs compiled ms (interleaved pairs), error and graph breaks at one budget."""
    torch._dynamo.reset()
    counters.clear()
    tree = random_tree(model.config.vocab_size, budget)
    compiled = torch.compile(tree_forward, dynamic=False, mode=mode)

    def run(forward):
        return verify_batch(model, [cache.snapshot()], [tree], "wy", forward=forward)[0].logits

    compile_ms, fast = timed(lambda: run(compiled))
    eager_out = run(tree_forward)
    err = float((fast - eager_out).abs().max() / eager_out.abs().max())
    eager, comp = [], []
    for _ in range(repeats + 1):  # the first pair is a warm-up
        eager.append(timed(lambda: run(tree_forward))[0])
        comp.append(timed(lambda: run(compiled))[0])
    eager, comp = eager[1:], comp[1:]
    return {"budget": budget, "mode": mode or "default", "device": str(device), "compile_s": compile_ms / 1e3,
            "eager_ms": float(pd.Series(eager).median()), "compiled_ms": float(pd.Series(comp).median()),
            **ratio_columns("compiled/eager", comp, eager), "max_rel_err": err,
            "graph_breaks": int(sum(counters["graph_break"].values()))}


def run_arch(arch: str, args, device) -> list[dict]:
    """Every budget on one target; eager and compiled alike run a mixture-of-experts layer as
    the compiled loop does (``verify.loop_ready``: grouped matmuls), so the ratio is the
    compiler's alone."""
    model = build_target(arch).to(device).eval()
    rows = []
    with loop_ready(model):
        cache, _ = prefill(model, random_prefix(model, args.prefix))
        for budget in args.budgets:
            row = {"arch": arch, "prefix": args.prefix, "repeats": args.repeats, **budget_row(
                model, cache, budget, args.repeats, args.mode, device)}
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            rows.append(row)
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="budgets 1 and 16, 6 repeats, GDN only")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--prefix", type=int, default=128)
    p.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    p.add_argument("--archs", default="gdn,mla")
    p.add_argument("--mode", default=None, help="torch.compile mode (reduce-overhead: CUDA graphs)")
    p.add_argument("--out", default=str(OUT))
    return p


@torch.no_grad()
def run(**options) -> None:
    """The bench with ``parser()``'s defaults, changed by ``options`` (its options' names)."""
    args = parser().parse_args([])
    vars(args).update(options)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    archs = args.archs.split(",")
    if args.quick:
        args.budgets, args.repeats, archs = [1, 16], 6, ["gdn"]
    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = [r for arch in archs for r in run_arch(arch, args, device)]
    write_timing_table(pd.DataFrame(rows), args.out)
    print(f"-> {args.out}")


def main() -> None:
    run(**vars(parser().parse_args()))


if __name__ == "__main__":
    main()
