"""The decoding loop: lossless at T=0 (token for token) and T>0 (in distribution)."""
import pytest
import torch

from ddtree_lab.core import allocate, decode, lossless, rules
from ddtree_lab.core.lossless import check_lossless
from ddtree_lab.core import tree as tree_mod
from ddtree_lab.core.models import build_target
from helpers import HintedDrafter, assert_close, toy_pair
from helpers import no_residual as _no_residual, sharp_drafter as _sharp

PAIRS = {p: toy_pair(p) for p in ("gdn-toy", "mla-toy")}
CASES = [("gdn-toy", "wy"), ("gdn-toy", "fork"), ("mla-toy", "wy")]


@pytest.mark.parametrize("preset,mode", CASES, ids=[f"{p}-{m}" for p, m in CASES])
@pytest.mark.parametrize("method,budget,block", [("dflash", 7, 8), ("ddtree", 32, 8), ("ddtree", 5, 4)],
                         ids=["dflash", "ddtree32", "ddtree5-block4"])
def test_greedy_speculative_equals_ar(preset, mode, method, budget, block):
    """T=0: output == AR token for token, with a drafter that gets draft tokens accepted
    (a random toy drafter alone is almost never right, which would make the test vacuous)."""
    target, drafter = PAIRS[preset]
    g = torch.Generator().manual_seed(3)
    accepted, rounds = 0, 0
    for _ in range(3):
        prompt = torch.randint(0, 63, (int(torch.randint(1, 12, (), generator=g)),), generator=g)
        ar = decode.generate(target, None, prompt, method="ar", max_new_tokens=16)
        hinted = HintedDrafter(drafter, prompt.tolist() + ar.tokens)
        spec = decode.generate(target, hinted, prompt, method=method, budget=budget, block_size=block,
                               max_new_tokens=16, gdn_mode=mode)
        assert spec.tokens == ar.tokens, f"prompt {prompt.tolist()}"
        assert len(spec.tokens) == 16 and sum(spec.acceptance_lengths) >= 16
        accepted += sum(spec.acceptance_lengths) - len(spec.acceptance_lengths)
        rounds += len(spec.acceptance_lengths)
    print(f"{preset} {mode} {method}: {accepted} draft tokens accepted in {rounds} rounds")
    assert accepted > 0, "the test never exercised an accepted draft token"
    assert rounds > 3, "every round accepted everything: the rejection path never ran"


def test_naive_mode_is_measured_not_hidden():
    target, drafter = PAIRS["gdn-toy"]
    prompt = torch.arange(1, 9)
    g = decode.generate(target, drafter, prompt, method="ddtree", budget=32, block_size=8,
                        max_new_tokens=16, gdn_mode="naive")
    assert len(g.tokens) == 16  # runs; whether it matches AR is what the notebooks measure


def _check(target, drafter, prompt, temperature, method="ddtree", accept_rule="rejection"):
    """``check_lossless`` of the first two tokens over 400 seeded runs (DDTree-6 / a chain, block 4)."""
    return check_lossless(target, drafter, [prompt], method=method, budget=6, block_size=4, temperature=temperature,
                          accept_rule=accept_rule, samples=400, positions=2)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["dflash", "ddtree"])
@pytest.mark.parametrize("accept_rule", ["rejection", "target"])
def test_sampling_is_lossless_and_the_test_has_power(monkeypatch, method, accept_rule):
    """T>0, both acceptance rules, chain and tree: the first two tokens fit the target's exact
    distribution (``check_lossless``); a deliberately biased rule is rejected by the same check
    (target-only: ``lossless.biased_walk``, accept the first child on a mismatch; rejection: no
    residual update)."""
    target, drafter = PAIRS["gdn-toy"]
    drafter = _sharp(drafter)
    prompt, T = [5, 9, 2], 0.5
    fair = _check(target, drafter, prompt, T, method, accept_rule)
    if accept_rule == "target":
        biased = _check(target, drafter, prompt, T, method, lossless.biased_walk(1.0))
    else:
        monkeypatch.setattr(rules, "_renormalised", _no_residual)
        biased = _check(target, drafter, prompt, T, method, accept_rule)
    print(f"{method} {accept_rule}: fair {fair.text()}; biased {biased.text()}")
    assert fair.passed
    assert biased.p_value < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("method,mutant", [("dflash", False), ("ddtree", True)])
def test_dflash2_conditional_sampling_is_lossless_at_T08_and_a_biased_rule_fails(monkeypatch, method, mutant):
    """T = 0.8, a DFlash 2 drafter (conditional trees, the selector's path as the chain, q
    given the parent token): the first two tokens fit the target's exact distribution. On the
    tree the rejection walk without the residual update fails the same check; on the chain
    this toy drafter's q barely overlaps p, so that mutant moves little and is not asserted
    (the parent-ignored walk is tested in test_conditional.py)."""
    from helpers import toy_dflash2
    target, drafter = toy_dflash2("gdn-toy")
    prompt, T = [5, 9, 2], 0.8
    fair = _check(target, drafter, prompt, T, method)
    print(f"dflash2 {method}: {fair.text()}")
    assert fair.passed
    if mutant:
        monkeypatch.setattr(rules, "_renormalised", _no_residual)
        biased = _check(target, drafter, prompt, T, method)
        print(f"dflash2 {method}: biased {biased.text()}")
        assert biased.p_value < 1e-3


BAD = [
    (dict(prompt_ids=[]), "prompt_ids"),
    (dict(prompt_ids=[1] * 600), "prompt_ids"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(budget=0), "budget"),
    (dict(budget=1025), "budget"),
    (dict(budget="big"), "budget"),
    (dict(block_size=16), "block_size"),
    (dict(temperature=-0.1), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(prompt_ids=torch.tensor([1.5, 2.0])), "prompt_ids"),
    (dict(prompt_ids=[1.0, 2.0]), "prompt_ids"),
    (dict(max_new_tokens=10**7), "max_new_tokens"),
    (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(method="beam"), "method"),
    (dict(gdn_mode="exactish"), "gdn_mode"),
    (dict(budget="auto"), "cost_model"),
]


@pytest.mark.parametrize("override,name", BAD, ids=[n + str(i) for i, (_, n) in enumerate(BAD)])
def test_bad_input_is_refused_before_work(override, name):
    target, drafter = PAIRS["gdn-toy"]
    kwargs = dict(prompt_ids=[1, 2, 3], method="ddtree", budget=8, block_size=8, max_new_tokens=4)
    kwargs.update(override)
    with pytest.raises(ValueError, match=name) as err:
        decode.generate(target, drafter, **kwargs)
    print(err.value)


def test_max_new_tokens_message_names_the_limit():
    target, drafter = PAIRS["gdn-toy"]
    with pytest.raises(ValueError, match=r"max_new_tokens must be an int in \[1, 501\].*512 positions"):
        decode.generate(target, drafter, [1, 2, 3], method="ddtree", budget=4, block_size=8, max_new_tokens=10**7)
    with pytest.raises(ValueError, match=r"max_new_tokens must be an int in \[1, 509\]"):
        decode.generate(target, None, [1, 2, 3], method="ar", max_new_tokens=10**7)


def test_vocab_mismatch_is_refused():
    from dataclasses import replace
    from ddtree_lab.core.models import TOY_PRESETS
    _, drafter = PAIRS["gdn-toy"]
    other = build_target(replace(TOY_PRESETS["gdn-toy"], vocab_size=65))
    with pytest.raises(ValueError, match="vocab"):
        decode.generate(other, drafter, [1, 2], method="ddtree", budget=4, block_size=4, max_new_tokens=2)


def test_auto_budget_picks_a_prefix_of_the_largest_tree():
    from ddtree_lab.experiments.plumbing.costs import CostModel
    logits = torch.randn(7, 64) * 3
    flat = CostModel(budgets=(1, 256), verify_s=(1.0, 1.0), draft_s=0.0)  # free nodes: take all
    full = tree_mod.build_tree(logits, 1, 256)
    assert allocate.auto_trees([full], flat)[0].num_nodes == 256
    steep = CostModel(budgets=(1, 256), verify_s=(1.0, 1e6), draft_s=0.0)  # nodes cost: take one
    assert allocate.auto_trees([full], steep)[0].num_nodes == 1
    t = allocate.auto_trees([full], CostModel((1, 64, 256), (1.0, 1.5, 6.0), 0.1))[0]
    assert torch.equal(t.tokens, full.tokens[:len(t)])


@pytest.mark.parametrize("method, temperature", [("ar", 0.0), ("ddtree", 0.0), ("dflash", 0.7)])
def test_entropies_are_the_target_distributions_the_tokens_came_from(method, temperature):
    target, drafter = toy_pair("mla-toy")
    prompt = [3, 9, 4, 1]
    g = decode.generate(target, drafter, prompt, method=method, budget=6, block_size=4, max_new_tokens=12,
                 temperature=temperature, seed=1)
    with torch.no_grad():
        logits = target(torch.tensor([prompt + g.tokens])).logits[0, len(prompt) - 1:-1].double()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    expected = -(logp.exp() * logp).sum(-1)
    assert len(g.entropies) == len(g.tokens) == 12
    assert_close(f"entropy-{method}", expected, torch.tensor(g.entropies, dtype=torch.float64), 1e-4)
