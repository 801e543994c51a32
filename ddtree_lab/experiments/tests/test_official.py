"""Peer tests: the lab's loop beside the field's reference loop, ``dflash_generate``.

MLA (no recurrent state): the lab's linear DFlash equals the reference loop token for token and
round for round, and so on every attention-only class (Qwen3, Qwen3-MoE, Llama). GDN hybrid: the reference loop's rollback (``DynamicCache.crop``) leaves the
recurrent state of the rejected tokens in place, so it departs from AR; the lab does not."""
import pytest
import torch

from ddtree_lab import generate, load_pair
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.tests import test_any_model as any_model
from ddtree_lab.experiments.studies.official import crop_rollback_error, lab_generate_aligned, official_generate
from ddtree_lab.train.data import prompt_tokens

NEW, BLOCK, PROMPTS = 48, 8, (0, 1, 2)


@pytest.fixture(scope="module")
def pairs():
    return {arch: load_pair(arch) for arch in ("gdn", "mla")}


def random_drafter(pair):
    torch.manual_seed(0)
    return DFlashDrafter.from_config(pair.drafter.cfg, pair.target).eval()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["shipped", "random-init"])
def test_lab_dflash_equals_the_reference_loop_on_mla(pairs, which):
    pair = pairs["mla"]
    drafter = pair.drafter if which == "shipped" else random_drafter(pair)
    for p in PROMPTS:
        ids = prompt_tokens(pair.tokenizer, p)
        ref = official_generate(pair.target, drafter, ids, NEW, BLOCK)
        tokens, gen = lab_generate_aligned(pair.target, drafter, ids, NEW, BLOCK)
        assert tokens == ref["tokens"], f"prompt {p}: tokens differ"
        # every round the reference loop starts at least a block before the length limit; a
        # later round's block it caps at the limit (the lab's last round runs whole and is cut)
        whole = _uncapped_rounds(ref["acceptance_lengths"])
        assert whole >= len(ref["acceptance_lengths"]) - (BLOCK - 1)  # at most BLOCK - 1 rounds start in the last block
        assert gen.acceptance_lengths[:whole] == ref["acceptance_lengths"][:whole], f"prompt {p}: rounds differ"
        assert sum(ref["acceptance_lengths"]) == NEW - 1 and len(gen.acceptance_lengths) <= len(ref["acceptance_lengths"])


def _uncapped_rounds(lengths: list[int]) -> int:
    """How many of the reference loop's rounds start with a whole block before ``NEW`` (the
    first token, then each round's accepted tokens)."""
    start, n = 1, 0
    for a in lengths:
        if start + BLOCK > NEW:
            break
        start, n = start + a, n + 1
    return n


@pytest.mark.slow
def test_on_gdn_the_lab_equals_ar_where_the_reference_loop_does_not(pairs):
    pair = pairs["gdn"]
    departs = 0
    for p in PROMPTS:
        ids = prompt_tokens(pair.tokenizer, p)
        ar = generate(pair.target, None, ids, method="ar", max_new_tokens=NEW).tokens
        tokens, _ = lab_generate_aligned(pair.target, pair.drafter, ids, NEW, BLOCK)
        assert tokens == ar, f"prompt {p}: the lab's exact loop departs from AR"
        departs += official_generate(pair.target, pair.drafter, ids, NEW, BLOCK)["tokens"] != ar
    print(f"dflash_generate departs from AR on {departs} of {len(PROMPTS)} prompts")
    assert departs >= 1, "the reference loop now equals AR on GDN: has transformers fixed DynamicCache.crop?"


def test_dynamic_cache_crop_does_not_roll_back_the_gdn_state(pairs):
    """transformers' crop on the GDN hybrid leaves the rejected tokens in the recurrent state;
    on MLA it is exact to rounding."""
    gen = torch.Generator().manual_seed(0)
    errors = {}
    for arch, pair in pairs.items():
        ids = prompt_tokens(pair.tokenizer, 0)
        rejected = torch.randint(4, pair.target.config.vocab_size, (5,), generator=gen).tolist()
        errors[arch] = crop_rollback_error(pair.target, ids, rejected, ids[-1])
    print(f"crop rollback logit error: {errors}")
    assert errors["mla"] < 1e-4 and errors["gdn"] > 1e-2


@pytest.mark.slow
def test_at_t_above_0_the_reference_sampler_and_the_lab_agree_in_distribution(monkeypatch):
    """MLA toy target, T = 0.8: the first two tokens of the reference loop's rejection sampler
    and of the lab's DFlash (rejection rule) both fit the target's exact distribution
    (chi-square); the lab with a biased rule (no residual) fails the same test."""
    from helpers import chi_square_pvalue, exact_first_two, no_residual, toy_pair
    from ddtree_lab.core import rules
    target, drafter = toy_pair("mla-toy")
    with torch.no_grad():  # a drafter whose q is far from p, so a wrong rule shows
        drafter.model.norm.weight.mul_(8.0)
    prompt, T, n = torch.tensor([5, 9, 2]), 0.8, 400
    p1, p2 = exact_first_two(target, prompt, T)

    def counts(run):
        c = torch.zeros(2, target.config.vocab_size)
        for seed in range(n):
            tokens = run(seed)
            c[0, tokens[0]] += 1
            c[1, tokens[1]] += 1
        return c

    reference = counts(lambda s: official_generate(target, drafter, prompt, 2, 4, temperature=T, seed=s)["tokens"])
    lab = counts(lambda s: generate(target, drafter, prompt.tolist(), method="dflash", block_size=4, max_new_tokens=2,
                                    temperature=T, seed=s).tokens)
    monkeypatch.setattr(rules, "_renormalised", no_residual)
    biased = counts(lambda s: generate(target, drafter, prompt.tolist(), method="dflash", block_size=4,
                                       max_new_tokens=2, temperature=T, seed=s).tokens)
    pv = {name: [chi_square_pvalue(c[i], p) for i, p in enumerate((p1, p2))]
          for name, c in (("reference", reference), ("lab", lab), ("biased", biased))}
    print(pv)
    assert min(pv["reference"]) > 1e-3 and min(pv["lab"]) > 1e-3
    assert min(pv["biased"]) < 1e-3


@pytest.mark.parametrize("arch", ["mla", "gdn"])
def test_round_lengths_read_by_the_hook_are_the_loops_own_stats(pairs, arch, monkeypatch):
    """``official_generate`` reads the round lengths with a forward pre-hook; the loop's own
    ``return_stats`` (its CUDA timer swapped for the host clock, in this test only) must agree."""
    import time
    import dflash.model as dm
    pair = pairs[arch]
    ids = prompt_tokens(pair.tokenizer, 7)
    got = official_generate(pair.target, pair.drafter, ids, 40, 8)
    monkeypatch.setattr(dm, "_cuda_time", time.perf_counter)
    stats = dm.dflash_generate(pair.drafter.model, pair.target, torch.as_tensor(ids)[None], 40, None, block_size=8,
                               return_stats=True)
    assert got["acceptance_lengths"] == list(stats.acceptance_lengths)
    assert got["tokens"] == stats.output_ids[0, len(ids):].tolist() and sum(got["acceptance_lengths"]) == 39


@pytest.mark.parametrize("model_type", [t for t in sorted(any_model.MODELS) if any_model.label(t) == "attention"])
def test_on_every_attention_class_the_lab_equals_the_reference_loop(model_type):
    """The DDTree paper's own target classes (Qwen3, Qwen3-MoE) and Llama, tiny and random:
    the lab's DFlash equals ``dflash_generate`` in tokens and in rounds (issue 25)."""
    model = any_model.target(model_type)
    cfg = DrafterConfig.for_target(model, mask_token_id=any_model.SHAPE["vocab_size"] - 1, num_layers=1, block_size=6)
    torch.manual_seed(1)
    drafter = DFlashDrafter.from_config(cfg, model).eval()
    prompt = [5, 9, 3, 17, 22, 8, 4, 11]
    ref = official_generate(model, drafter, prompt, 24, 6)
    tokens, gen = lab_generate_aligned(model, drafter, prompt, 24, 6)
    assert tokens == ref["tokens"]
    assert gen.acceptance_lengths[:-1] == ref["acceptance_lengths"][:len(gen.acceptance_lengths) - 1]
    assert len(gen.acceptance_lengths) == len(ref["acceptance_lengths"]) and max(ref["acceptance_lengths"]) > 1
