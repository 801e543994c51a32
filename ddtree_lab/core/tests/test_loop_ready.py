"""The kernels every lab loop runs its target on (``verify.loop_ready``): MoE experts as
transformers' ``grouped_mm`` while a loop runs, the model's own setting back after; the same
logits as the eager experts loop (scale-aware), so a loop on them keeps every token."""
import torch

from ddtree_lab.core import adapter, decode
from ddtree_lab.core import verify
from helpers import HintedDrafter, assert_close, toy_pair


def test_loop_ready_switches_moe_experts_and_restores():
    target, _ = toy_pair("mla-toy")
    assert target.config._experts_implementation == "eager"
    with verify.loop_ready(target):
        assert target.config._experts_implementation == "grouped_mm"
    assert target.config._experts_implementation == "eager"
    gdn, _ = toy_pair("gdn-toy")  # no experts: left as it is
    assert verify.experts_setting(gdn) is None
    with verify.loop_ready(gdn):
        assert verify.experts_setting(gdn) is None


def test_loop_ready_restores_after_an_error():
    target, _ = toy_pair("mla-toy")
    try:
        with verify.loop_ready(target):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert target.config._experts_implementation == "eager"


@torch.inference_mode()
def test_grouped_experts_give_the_eager_logits():
    """A 9-token forward on a cache of 20 rows: the same logits under both experts kernels."""
    target, _ = toy_pair("mla-toy")
    ids = torch.randint(0, target.config.vocab_size, (1, 29), generator=torch.Generator().manual_seed(0))
    eager = target(ids).logits
    with verify.loop_ready(target):
        grouped = target(ids).logits
    assert_close("grouped_mm vs eager experts", eager, grouped, 1e-5)
    assert torch.equal(eager.argmax(-1), grouped.argmax(-1))


def test_every_loop_runs_on_the_loop_kernels():
    """AR and a speculative loop see grouped experts in every forward; the setting is back after."""
    target, drafter = toy_pair("mla-toy")
    seen = []
    hook = target.register_forward_pre_hook(lambda m, a: seen.append(m.config._experts_implementation))
    try:
        prompt = torch.arange(3, 12)
        ar = decode.generate(target, None, prompt, method="ar", max_new_tokens=12)
        hinted = HintedDrafter(drafter, prompt.tolist() + ar.tokens)
        dd = decode.generate(target, hinted, prompt, method="ddtree", budget=8, max_new_tokens=12)
    finally:
        hook.remove()
    assert dd.tokens == ar.tokens
    assert seen and set(seen) == {"grouped_mm"}, set(seen)
    assert target.config._experts_implementation == "eager"


def test_float64_models_keep_the_eager_experts():
    """grouped_mm takes no float64: a float64 loop (the proofs) keeps the eager experts loop."""
    target, _ = toy_pair("mla-toy")
    target = target.double()
    with verify.loop_ready(target):
        assert target.config._experts_implementation == "eager"
        target(torch.arange(3, 9)[None])
