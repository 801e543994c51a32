"""The compiled loop (``GenerationSpec.compile``): at T = 0 a compiled speculative generation
equals the compiled AR one and the eager one token for token, in one graph per forward (no
graph break), on a GDN hybrid and an MLA + MoE target; the experts setting comes back.

The compiling tests share one xdist worker (``COMPILE_GROUP``; ``test.sh`` runs ``--dist
loadgroup``), one after the other: inductor caches each kernel it builds on disk by its source,
so a later test reuses the kernels an earlier one compiled instead of compiling them at the same
time on the other core (about 220 s for the three here, against about 360 s split)."""
import pytest
import torch
from torch._dynamo.utils import counters

from ddtree_lab.core import decode
from ddtree_lab.core.spec import GenerationSpec
from helpers import COMPILE_GROUP, HintedDrafter, toy_pair


def test_compile_must_be_a_bool():
    with pytest.raises(ValueError, match="compile must be True or False, got 'yes'"):
        GenerationSpec(compile="yes")


@pytest.mark.slow
@pytest.mark.xdist_group(COMPILE_GROUP)
@pytest.mark.parametrize("preset", ["gdn-toy", "mla-toy"])
def test_compiled_equals_eager_and_ar(preset):
    """Compiled DFlash and DDTree == compiled AR == eager, with draft tokens accepted and
    rejected (hinted drafter), prompts of two lengths (the recompile with a symbolic length),
    and no graph break."""
    target, drafter = toy_pair(preset)
    counters.clear()
    accepted = 0
    for prompt in (torch.arange(3, 12), torch.arange(20, 25)):
        ar = decode.generate(target, None, prompt, method="ar", max_new_tokens=20)
        ar_c = decode.generate(target, None, prompt, method="ar", max_new_tokens=20, compile=True)
        assert ar_c.tokens == ar.tokens
        hinted = HintedDrafter(drafter, prompt.tolist() + ar.tokens)
        for method, budget in (("dflash", 1), ("ddtree", 12)):
            g = decode.generate(target, hinted, prompt, method=method, budget=budget, block_size=6,
                                max_new_tokens=20, compile=True)
            assert g.tokens == ar.tokens, f"{method} on {prompt.tolist()}"
            accepted += sum(g.acceptance_lengths) - len(g.acceptance_lengths)
            assert any(a < 6 for a in g.acceptance_lengths), "no rejection ran"
    assert accepted > 0
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert target.config._experts_implementation == "eager"


@pytest.mark.slow
@pytest.mark.xdist_group(COMPILE_GROUP)
def test_a_compiled_batch_equals_the_eager_batch():
    """``generate_batch(..., compile=True)``: prompts of three lengths (left padding, per-sequence
    trees), AR and DDTree, the same tokens as eager."""
    target, drafter = toy_pair("mla-toy")
    prompts = [torch.arange(3, 12), torch.arange(20, 25), torch.arange(5, 19)]
    for method in ("ar", "ddtree"):
        eager = decode.generate_batch(target, drafter, prompts, method=method, budget=8, block_size=6,
                                      max_new_tokens=12)
        fast = decode.generate_batch(target, drafter, prompts, method=method, budget=8, block_size=6,
                                     max_new_tokens=12, compile=True)
        assert [g.tokens for g in fast] == [g.tokens for g in eager], method
