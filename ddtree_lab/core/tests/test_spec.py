"""The generation spec: validated once when built, carried whole, the same run as its keyword form."""
import pytest

from ddtree_lab.core import decode
from ddtree_lab.core import spec
from ddtree_lab.core.spec import MAX_BUDGET, GenerationSpec, Sampling
from helpers import toy_pair

PAIR = toy_pair("gdn-toy")


@pytest.mark.parametrize("seed", ["7", 1.5, True, -1, None], ids=["str", "float", "bool", "negative", "none"])
@pytest.mark.parametrize("temperature", [0.0, 0.7], ids=["T0", "T0.7"])
def test_seed_must_be_a_non_negative_int(seed, temperature):
    with pytest.raises(ValueError, match=r"seed must be an int >= 0"):
        Sampling(temperature, seed=seed)
    target, drafter = PAIR
    with pytest.raises(ValueError, match=r"seed must be an int >= 0"):
        decode.generate(target, drafter, [1, 2, 3], method="ddtree", budget=4, block_size=4,
                        max_new_tokens=4, temperature=temperature, seed=seed)
    with pytest.raises(ValueError, match=r"seed must be an int >= 0"):
        decode.generate_batch(target, drafter, [[1, 2, 3]], method="ar", max_new_tokens=4, seed=seed)


@pytest.mark.parametrize("field,value,message", [
    ("method", "beam", r"method must be one of \('ar', 'dflash', 'ddtree'\)"),
    ("budget", 0, rf"budget must be an int in \[1, {MAX_BUDGET}\] or 'auto'"),
    ("budget", MAX_BUDGET + 1, rf"budget must be an int in \[1, {MAX_BUDGET}\]"),
    ("budget", True, r"budget must be an int"),
    ("budget", (4, "auto"), r"one int per prompt, or 'auto'"),
    ("block_size", 1, r"block_size must be an int >= 2"),
    ("max_new_tokens", 0, r"max_new_tokens must be an int >= 1"),
    ("tree", "wide", r"tree must be a rule .* one of \('unary', 'conditional'\) or None"),
    ("tree", 3, r"tree must be a rule \(a callable rule\(draft, root_token, budget\)"),
    ("gdn_mode", "exact", r"gdn_mode must be one of \('naive', 'fork', 'wy'\)"),
], ids=lambda x: str(x)[:20])
def test_a_bad_field_names_itself_and_its_range(field, value, message):
    with pytest.raises(ValueError, match=message):
        GenerationSpec(**{field: value})


@pytest.mark.parametrize("field,value,message", [
    ("temperature", -0.1, r"temperature must be a finite number >= 0"),
    ("temperature", float("nan"), r"temperature must be a finite number >= 0"),
    ("accept_rule", "greedy", r"accept_rule must be a walk .* or one of \('rejection', 'target'\)"),
])
def test_a_bad_sampling_field_names_itself(field, value, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**{field: value})


def test_the_mode_is_an_object_from_the_api_on():
    naive = GenerationSpec(gdn_mode="naive")
    assert isinstance(naive.gdn_mode, spec.NaiveMode) and not naive.gdn_mode.exact
    assert GenerationSpec(gdn_mode=spec.ForkMode()).gdn_mode.name == "fork"
    assert GenerationSpec().gdn_mode.exact and GenerationSpec().gdn_mode.batched
    assert not spec.ForkMode().batched
    assert naive.as_dict()["gdn_mode"] == "naive" and naive.as_dict()["sampling"]["accept_rule"] == "rejection"


def test_spec_and_keywords_are_the_same_run_and_not_both():
    target, drafter = PAIR
    prompt = [3, 1, 4, 1, 5]
    spec = GenerationSpec(method="ddtree", budget=6, block_size=4, max_new_tokens=10,
                          sampling=Sampling(0.8, seed=5), gdn_mode="fork")
    by_spec = decode.generate(target, drafter, prompt, spec)
    by_keywords = decode.generate(target, drafter, prompt, method="ddtree", budget=6, block_size=4,
                                  max_new_tokens=10, temperature=0.8, seed=5, gdn_mode="fork")
    assert by_spec.tokens == by_keywords.tokens and by_spec.acceptance_lengths == by_keywords.acceptance_lengths
    with pytest.raises(ValueError, match="not both"):
        decode.generate(target, drafter, prompt, spec, budget=8)
    with pytest.raises(TypeError, match=r"unknown generation argument\(s\) \['budgett'\]"):
        decode.generate(target, drafter, prompt, method="ddtree", budgett=8)


def test_model_checks_still_run_once_before_any_work():
    target, drafter = PAIR
    with pytest.raises(ValueError, match=r"block_size must be an int in \[2, "):
        decode.generate(target, drafter, [1, 2], GenerationSpec(block_size=drafter.cfg.block_size + 1))
    with pytest.raises(ValueError, match="per-prompt lists: generate_batch"):
        decode.generate(target, drafter, [1, 2], GenerationSpec(budget=(4, 5)))
    with pytest.raises(ValueError, match=r"budget must be one value or a list of 3"):
        decode.generate_batch(target, drafter, [[1], [2], [3]], GenerationSpec(budget=(4, 5)))


def test_a_batch_owns_its_seconds():
    target, drafter = PAIR
    gens = decode.generate_batch(target, drafter, [[1, 2], [3, 4, 5]], method="dflash", block_size=4,
                                 max_new_tokens=[3, 6])
    assert gens[0].timings == gens[1].timings
    total = sum(len(g.tokens) for g in gens)
    assert decode.batch_tokens_per_s(gens) == pytest.approx(total / gens[0].timings["total"], rel=1e-12)
