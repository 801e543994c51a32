"""A stack's fixed cost per forward, measured (issue 69 item 8): the projection's main unknown
(``k26_bounds`` spans 0-25 ms of it). A tiny MoE (the ``mla-toy`` preset: MLA + routed experts)
does almost no arithmetic, so its forward's time is what the stack adds whatever the model:
launches, the Python of the module tree, synchronisation. One forward of 1 token and of 16 tokens
on a prefilled cache, eager and compiled (``torch.compile``; on CUDA also mode "reduce-overhead",
CUDA graphs), the median of interleaved repeats.

    python -m ddtree_lab.experiments.studies.fixed_cost --out data/results/gpu   # on a lent GPU
    python -m ddtree_lab.experiments.studies.fixed_cost --dry --out /tmp/x       # the CPU dry run (eager only)

Writes ``fixed_cost.csv``: device, mode, tokens, ms (median), repeats. The fixed cost per forward
to put into the bounds is the 1-token row of the mode a stack runs; the 16-token row says how much
of it grows with the tokens. Tensor-parallel collectives are not in it: one device.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import pandas as pd
import torch

from ...core.models import build_target
from ..plumbing.measure import interleaved

PRESET, PREFIX, TOKENS = "mla-toy", 64, (1, 16)


def forward_fn(model, tokens: int, device: str):
    """A forward of ``tokens`` new rows after a ``PREFIX``-row prefix (the cache cropped back after each call)."""
    prefix = torch.arange(PREFIX, device=device)[None] % model.config.vocab_size
    with torch.inference_mode():
        cache = model(prefix, use_cache=True).past_key_values
    new = torch.arange(tokens, device=device)[None] % model.config.vocab_size
    positions = torch.arange(PREFIX, PREFIX + tokens, device=device)[None]

    def run():
        with torch.inference_mode():
            model(new, past_key_values=cache, position_ids=positions, use_cache=True)
            cache.crop(-tokens)   # back to the prefix for the next call
    return run


def modes(device: str, dry: bool) -> dict:
    """{mode: how the model is wrapped}: eager always; compiled unless ``dry``; CUDA graphs on CUDA."""
    out = {"eager": lambda m: m}
    if not dry:
        out["compiled"] = lambda m: torch.compile(m, dynamic=False)
        if device == "cuda":
            out["compiled reduce-overhead"] = lambda m: torch.compile(m, mode="reduce-overhead", dynamic=False)
    return out


def measure(device: str = "cpu", repeats: int = 20, dry: bool = False) -> pd.DataFrame:
    """One row per (mode, tokens): the median ms of ``repeats`` interleaved forwards."""
    rows = []
    for mode, wrap in modes(device, dry).items():
        model = wrap(build_target(PRESET).to(device).eval())
        fns = {t: forward_fn(model, t, device) for t in TOKENS}
        for fn in fns.values():   # compile / warm every shape before timing
            fn()
        times = interleaved(fns, repeats)
        rows += [{"device": device, "mode": mode, "tokens": t, "ms": statistics.median(v), "repeats": len(v),
                  "model": PRESET} for t, v in times.items()]
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for fixed_cost.csv")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--dry", action="store_true", help="eager only, 3 repeats: the CPU check that the step runs")
    args = p.parse_args(argv)
    table = measure(args.device, 3 if args.dry else args.repeats, args.dry)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "fixed_cost.csv", index=False, float_format="%.6g")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
