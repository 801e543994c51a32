"""A measured verify time by budget beside the projection (issue 61, item 2): the GPU half of
``ddtree_lab.experiments.studies.gpu_projection``, run by ``scripts/gpu_check.sh``.

Builds Kimi K2.6's layers at full width on the device (one dense layer, one MoE layer with the
published 384 routed experts on a GPU; random init, so routing is near independent), times
``verify`` of a random tree at every budget (median of ``--repeats`` after a warm-up), counts the
distinct routed experts the verify loaded, and writes beside it the kernel-floor projection of
the same layers on the accelerator's datasheet (``gpu_projection.forward_seconds``, stated
efficiencies, the measured union):

    python scripts/gpu_projection_check.py --device cuda --out data/results/gpu
    python scripts/gpu_projection_check.py --tiny --accelerator h200 --out /tmp/x   # the CPU smoke run

Output: OUT/verify_projection-<dtype>.csv (stamped: ``write_timing_table``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_lab.core.models import _model_class, build_target  # noqa: E402
from ddtree_lab.core.verify import prefill, verify  # noqa: E402
from ddtree_lab.experiments.plumbing.measure import random_tree, timed  # noqa: E402
from ddtree_lab.experiments.plumbing.results import write_timing_table  # noqa: E402
from ddtree_lab.experiments.studies import gpu_projection as gp  # noqa: E402
from ddtree_lab.experiments.studies.expert_union import independent_union  # noqa: E402
from ddtree_lab.experiments.studies.full_size import full_size_config  # noqa: E402
from ddtree_lab.experiments.studies.full_size_cost import random_prefix  # noqa: E402
from ddtree_lab.experiments.studies.gpu_specs import ACCELERATORS, DRAFTERS, STACKS  # noqa: E402
from ddtree_lab.experiments.studies.precision import record_routing  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
NAMES = {"H100": "h100-sxm", "H200": "h200", "B200": "b200", "4090": "rtx4090"}


def accelerator_key(args) -> str:
    """--accelerator, or the datasheet row whose name the CUDA device's name holds."""
    if args.accelerator:
        return args.accelerator
    name = torch.cuda.get_device_name() if args.device == "cuda" else ""
    key = next((k for tag, k in NAMES.items() if tag in name), None)
    if key is None:
        raise SystemExit(f"no datasheet row for device {name or args.device!r}: pass --accelerator "
                         f"({', '.join(ACCELERATORS)})")
    return key


def build(args):
    """The timed model on the device, built there in its dtype (a 384-expert layer never goes
    through the host): the toy MLA preset with --tiny."""
    if args.tiny:
        return build_target("mla-toy", dtype=DTYPES[args.dtype]).to(args.device)
    hf = full_size_config("kimi-k2.6", num_layers=2, dense_layers=1, num_experts=args.experts,
                          vocab_size=args.vocab).hf_config()
    hf._attn_implementation = "eager"
    hf._experts_implementation = "grouped_mm" if args.device == "cuda" else "eager"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(DTYPES[args.dtype])
    try:
        with torch.device(args.device):
            model = _model_class("mla")(hf).eval()
    finally:
        torch.set_default_dtype(default)
    try:
        with torch.no_grad():
            model(torch.tensor([[1, 2, 3]], device=args.device))
    except Exception as err:  # a kernel the device lacks: say so and time the eager experts
        print(f"experts implementation {hf._experts_implementation!r} failed ({err}); timing 'eager'", flush=True)
        model.config._experts_implementation = "eager"
    return model


def union_of(model, cache, tree) -> float:
    """Mean over MoE layers of the distinct routed experts one verify of ``tree`` loads."""
    with record_routing(model) as rec:
        verify(model, cache.snapshot(), tree, "wy")
        return statistics.mean(len(set(idx.flatten().tolist())) for _, idx in rec.values())


def time_budget(model, cache, tree, repeats: int) -> float:
    """Median ms of ``verify`` of ``tree`` on a snapshot of ``cache`` after one warm-up."""
    verify(model, cache.snapshot(), tree, "wy")
    return statistics.median(timed(lambda: verify(model, cache.snapshot(), tree, "wy"))[0] for _ in range(repeats))


def rows(model, args) -> list[dict]:
    c = model.config
    shape = gp.mla_shape(c, torch.finfo(DTYPES[args.dtype]).bits / 8)
    acc = accelerator_key(args)
    floor = gp.Setting(shape, DRAFTERS["Kimi K2.6"], ACCELERATORS[acc], 1, STACKS["kernel-floor"])
    prefix = random_prefix(c.vocab_size, args.prefix)
    cache, _ = prefill(model, prefix)
    out = []
    for b in args.budgets:
        tree = random_tree(c.vocab_size, b, 0)
        ms = time_budget(model, cache, tree, args.repeats)
        union = union_of(model, cache, tree)
        projected = 1e3 * float(gp.forward_seconds(floor, b + 1, union, context=args.prefix))
        out.append({"budget": b, "tokens": b + 1, "measured_ms": ms, "projected_ms": projected,
                    "measured_over_projected": ms / projected, "experts_per_moe_layer": union,
                    "independent_union": float(independent_union(c.n_routed_experts, c.num_experts_per_tok, b + 1)),
                    "accelerator": acc, "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
                    "dtype": args.dtype, "layers": c.num_hidden_layers, "experts": c.n_routed_experts,
                    "experts_implementation": c._experts_implementation, "tiny": args.tiny})
        print(out[-1], flush=True)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    p.add_argument("--tiny", action="store_true", help="the toy MLA preset through the same code (CPU smoke run)")
    p.add_argument("--accelerator", choices=sorted(ACCELERATORS), help="datasheet row (default: from the CUDA name)")
    p.add_argument("--budgets", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    p.add_argument("--experts", type=int, default=384, help="routed experts of the MoE layer (Kimi K2.6: 384)")
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--prefix", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=ROOT / "data" / "results" / "gpu")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import pandas as pd
    table = pd.DataFrame(rows(build(args), args))
    path = write_timing_table(table, args.out / f"verify_projection-{args.dtype}.csv")
    print(table.to_string(index=False))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
