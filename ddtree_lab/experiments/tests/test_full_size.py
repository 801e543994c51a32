"""Exact tree verification at the published layer widths (``core.full_size``, issue 12).

Each target is a few full-width layers (Qwen3.5-27B: GDN 16 key / 48 value heads of 128, gated
attention 24 / 4 heads of 256; Kimi K2.6: MLA 64 heads, q / kv ranks 1536 / 512, experts of
the published top-8), random init, saved with ``save_pretrained`` and loaded back through
``load_target`` as a real checkpoint. To fit the suite's time budget the per-token MLP widths
are cut (the dense MLP and the expert width, nothing verify touches); ``scripts/full_size_check.py``
runs the published widths everywhere and larger sweeps.

Row i of ``tree_logits`` must equal the stock forward (its own ``DynamicCache``) over
prefix + path(i), with the prefix longer than the stock GDN kernel's chunk (64), for fork,
wy and MLA, in float32 up to a relative 2e-5 (measured ~2e-6); naive must leak.
"""
from __future__ import annotations

import tempfile

import pandas as pd
import pytest
import torch

from ddtree_lab.core.verify import commit
from ddtree_lab.experiments.studies.full_size import (build_full_size, full_size_config, layer_shapes, published_shapes, relative_error,
                                       save_checkpoint, stock_path_logits, stock_tree_logits)
from ddtree_lab.core.models import load_target
from ddtree_lab.core.verify import prefill, tree_logits, verify
from helpers import COMPILE_GROUP, assert_close, generator, random_prefix, random_tree

torch.set_num_threads(1)

REL_TOL = 2e-5          # float32, ~10x the measured max relative logit error (2.3e-6)
PREFIX = 80             # > 64, the chunk of transformers' torch_chunk_gated_delta_rule
VOCAB = 1024
SUITE_SIZES = {"qwen3.5-27b": dict(num_layers=2, mlp_width=1024, vocab_size=VOCAB),
               "kimi-k2.6": dict(num_layers=2, mlp_width=1024, expert_width=512, num_experts=10,
                                 vocab_size=VOCAB)}
ARCH = {"qwen3.5-27b": "gdn", "kimi-k2.6": "mla"}


# one worker for the module: each checkpoint (15-18 s to build and save) is built once, not once a worker
pytestmark = pytest.mark.xdist_group("full_size")


@pytest.fixture(scope="module", params=list(SUITE_SIZES))
def checkpoint(request):
    """(preset name, checkpoint directory, the model loaded back with load_target)."""
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(build_full_size(request.param, **SUITE_SIZES[request.param]), tmp)
        yield request.param, tmp, load_target(tmp)


def test_checkpoint_has_published_layer_shapes(checkpoint):
    name, path, model = checkpoint
    got = layer_shapes(model)
    want = published_shapes(ARCH[name]) | full_size_config(name, **SUITE_SIZES[name]).widths()  # MLP widths cut
    print(name, got)
    assert got == want
    assert model.config._attn_implementation == "eager"


def test_device_map_auto_on_cpu(checkpoint):
    """accelerate is installed: device_map='auto' loads (no 'requires accelerate' error) with
    every weight on the CPU, and gives the float32 load's logits up to bf16 rounding."""
    name, path, model = checkpoint
    auto = load_target(path, dtype=torch.bfloat16, device_map="auto")
    devices = {p.device.type for p in auto.parameters()}
    print(name, "devices:", devices, "hf_device_map:", getattr(auto, "hf_device_map", None))
    assert devices == {"cpu"} and next(auto.parameters()).dtype == torch.bfloat16
    ids = torch.tensor([random_prefix(VOCAB, generator("device-map"), 8, 8)])
    with torch.no_grad():
        ref = model(ids).logits
        assert_close(f"{name}-device_map-auto-bf16", ref, auto(ids).logits.float(), 0.05 * ref.abs().max().item())


def test_tree_logits_equal_stock_forward(checkpoint):
    """Every node of a 64-node tree (MLA: 32, its oracle's per-leaf forwards cost most), every
    exact mode; the stock cached oracle == the stock uncached forward on the deepest path;
    naive leaks on the same tree."""
    name, _, model = checkpoint
    budget = 64 if ARCH[name] == "gdn" else 32
    gen = generator("tree-logits", name)
    prefix, tree = random_prefix(VOCAB, gen, PREFIX, PREFIX), random_tree("deep", budget, VOCAB, gen)
    ref = stock_tree_logits(model, prefix, tree)  # [65, V]
    deepest = tree.path_to(int(tree.depths.argmax()))
    scale = ref.abs().max().item()
    assert_close(f"{name}-oracle-cached-vs-uncached", stock_path_logits(model, prefix, tree, deepest[-1]),
                 ref[deepest], REL_TOL * scale)
    modes = ("fork", "wy") if ARCH[name] == "gdn" else ("wy",)
    for mode in modes:
        assert_close(f"{name}-{mode}-budget{budget}-prefix{PREFIX}", ref, tree_logits(model, prefix, tree, mode),
                     REL_TOL * scale)
    if ARCH[name] == "gdn":
        leak = relative_error(ref, tree_logits(model, prefix, tree, "naive"))
        print(f"{name}-naive: relative error {leak:.3e}")
        assert leak > 1e-2


def test_commit_equals_fresh_prefill(checkpoint):
    """Three rounds of verify + commit (deepest path) leave the cache as a fresh prefill of the
    committed sequence: attention rows and GDN conv / recurrent states."""
    name, _, model = checkpoint
    gen = generator("commit", name)
    committed = random_prefix(VOCAB, gen, 60, 60)  # the rounds carry the cache across the 64-token chunk
    for mode in (("fork", "wy") if ARCH[name] == "gdn" else ("wy",)):
        seq = list(committed)
        cache, _ = prefill(model, seq)
        for r in range(3):
            tree = random_tree("deep", 16, VOCAB, gen)
            out = verify(model, cache, tree, mode)
            path = tree.path_to(int(tree.depths.argmax()))
            commit(model, cache, out.pending, path)
            seq += tree.tokens[path].tolist()
        fresh, _ = prefill(model, seq)
        assert cache.length == fresh.length == len(seq) and len(seq) > 64
        for kind in ("kv", "conv", "rec"):
            for i, ref in getattr(fresh, kind).items():
                ref, out = (ref, getattr(cache, kind)[i]) if kind != "kv" else (ref[0], cache.kv[i][0][..., :len(seq), :])
                assert_close(f"{name}-{mode}-round3-layer{i}-{kind}", ref, out, REL_TOL * ref.abs().max().item())


def test_readme_tables_render_from_the_stored_results():
    """The README's full-size tables come from data/results/full_size/ (the README block is
    checked against this rendering by tests/test_readme.py once registered there)."""
    import pandas as pd

    from ddtree_lab.common import ROOT
    from ddtree_lab.experiments.studies.full_size_cost import README_SOURCES, render_readme
    missing = [f for f in README_SOURCES if not (ROOT / f).is_file()]
    assert not missing, f"run scripts/full_size_check.py (cost, exact) and scripts/tp_verify.py: {missing}"
    text = render_readme()
    print(text)
    cost = pd.read_csv(ROOT / README_SOURCES[0]).set_index("budget")
    assert f"| 64 | {cost.loc[64, 'naive_ms']:.0f} |" in text
    assert text.count("qwen3.5-27b") == 4 and text.count("kimi-k2.6") == 4


@pytest.mark.slow
@pytest.mark.xdist_group(COMPILE_GROUP)   # it compiles the toy GDN verify: after test_compiled, from the kernel cache
def test_gpu_check_script_tiny(tmp_path):
    """scripts/gpu_check.sh --tiny runs every step of the GPU run with the toy presets."""
    import os
    import subprocess

    from ddtree_lab.common import ROOT
    env = os.environ | {"GPU_CHECK_OUT": str(tmp_path), "GPU_CHECK_BUDGETS": "1 4", "GPU_CHECK_EXACT_BUDGETS": "1 4",
                        "GPU_CHECK_REPEATS": "1"}
    subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--tiny"], check=True, env=env)
    for dtype in ("float32", "bfloat16"):
        for stem in ("exactness", "gdn_cost"):
            assert (tmp_path / f"{stem}-{dtype}.csv").is_file()
        assert (tmp_path / f"gdn_cost-{dtype}.png").is_file()
    compiled = pd.read_csv(tmp_path / "compile-default.csv")  # the compiled verify ran, on the toy GDN target
    assert list(compiled.budget) == [1] and compiled.max_rel_err.iloc[0] < 1e-4
    measured = pd.read_csv(tmp_path / "verify_projection-bfloat16.csv")  # issue 61: measured beside projected
    assert list(measured.budget) == [1, 4] and (measured.measured_ms > 0).all() and (measured.projected_ms > 0).all()
    assert {"git", "machine", "date"} <= set(measured.columns)   # a stamped timing table
