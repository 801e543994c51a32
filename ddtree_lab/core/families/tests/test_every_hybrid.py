"""Every hybrid class the pinned transformers ships (issue 68), at tiny random sizes, float64,
through the lab's entry point ``load_target(dir)``:

- the specification's exact verify (``reference.verify_fork``: each node one stock step from
  its parent's cache, positions passed) equals each node's own path through ONE stock full
  forward (<= 1e-6); the stock departures the lab found are kept visible in their own tests
  (Bamba's and MiniMax's decode without positions, Jamba's continuation of several tokens);
- the naive verify (one stock forward over the flattened tree) is exact up to the first branch,
  then leaks, in every family;
- rounds of verify, greedy accept and commit reproduce AR token for token;
- ``generate`` falls back loudly to the specification for a family the fast loop does not run,
  and stays lossless.
"""
import functools
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from ddtree_lab import check_lossless, generate, reference_generate
from ddtree_lab.core import verify
from ddtree_lab.core import decode, families, reference
from ddtree_lab.core.decode import fast_loop_covers
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.families.tiny import HYBRIDS, build_tiny
from ddtree_lab.core.models import arch_of, load_target
from ddtree_lab.core.tree import DraftTree, accept
from helpers import HintedDrafter, assert_close, generator, random_tree

CLASSES = sorted(HYBRIDS)
# the stock decode without explicit positions departs from the stock full forward (float64): its
# positions come from the first layer's cache, a recurrent layer with no rows, and restart at 0
POSITIONS_FROM_A_RECURRENT_LAYER = {"BambaForCausalLM", "MiniMaxForCausalLM"}
# the stock forward of several tokens on a cache departs from the full forward: Jamba's scan starts
# from a zero state (its naive verify is wrong from the root on, before any branch)
STOCK_CONTINUATION_DEPARTS = {"JambaForCausalLM"}
VOCAB = 64


@functools.lru_cache(maxsize=None)
def saved(name: str) -> Path:
    """A tiny random ``name`` saved as a checkpoint directory (once per session)."""
    out = Path(tempfile.mkdtemp(prefix=f"hybrid-{name}-"))
    build_tiny(name, vocab_size=VOCAB, dtype=torch.float32).save_pretrained(out)
    return out


@functools.lru_cache(maxsize=None)
def model(name: str):
    return load_target(saved(name), dtype=torch.float64)


def full_logits(m, ids: list[int]) -> torch.Tensor:
    """Last-position logits [V] of one stock full forward over ``ids``."""
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0, -1]


def decode_logits(m, ids: list[int], length: int) -> torch.Tensor:
    """Last-position logits [V] of the stock AR decode: a prefill of ids[:length], then one step per token."""
    with torch.no_grad():
        out = reference.stock(m, torch.tensor(ids[:length]), None, 0)
        for j, t in enumerate(ids[length:]):
            out = reference.stock(m, torch.tensor([t]), out.past_key_values, length + j)
    return out.logits[0, -1]


def prefilled(m, prefix: list[int]):
    with torch.no_grad():
        return m(torch.tensor([prefix]), use_cache=True).past_key_values


@pytest.mark.parametrize("name", CLASSES)
def test_load_target_takes_every_hybrid_and_names_its_family(name):
    m = model(name)
    assert arch_of(m) == HYBRIDS[name]
    assert {families.name_of(f) for _, f in verify.recurrent_mixers(m).values()} == {HYBRIDS[name]}


@pytest.mark.parametrize("name", CLASSES)
def test_the_specifications_fork_is_each_nodes_own_path(name):
    m, gen = model(name), generator("fork", name)
    prefix = torch.randint(3, VOCAB, (9,), generator=gen).tolist()
    tree = random_tree("random", 12, VOCAB, gen)
    with torch.no_grad():
        logits, _, _ = reference.verify_fork(m, prefilled(m, prefix[:-1]), len(prefix) - 1, _rooted(tree, prefix[-1]), (0,))
    for i in range(len(tree)):
        ids = prefix + tree.tokens[tree.path_to(i)][1:].tolist()
        assert_close(f"{name} node {i}", full_logits(m, ids), logits[i], 1e-6)


@pytest.mark.parametrize("name", sorted(POSITIONS_FROM_A_RECURRENT_LAYER))
def test_the_stock_decode_restarts_its_positions_unless_given(name):
    """The stock decode counts positions from its first layer's cache, a recurrent layer with no
    rows: without explicit positions every step restarts at 0 and departs from the full forward;
    with them (as every lab loop passes them) it agrees."""
    m, gen = model(name), generator("positions", name)
    ids = torch.randint(3, VOCAB, (20,), generator=gen).tolist()
    with torch.no_grad():
        out = m(torch.tensor([ids[:14]]), use_cache=True)
        for t in ids[14:]:
            out = m(torch.tensor([[t]]), past_key_values=out.past_key_values, use_cache=True)
    unpositioned = (out.logits[0, -1] - full_logits(m, ids)).abs().max().item()
    positioned = (decode_logits(m, ids, 14) - full_logits(m, ids)).abs().max().item()
    print(f"{name} decode vs full forward: {unpositioned:.1e} without positions, {positioned:.1e} with")
    assert unpositioned > 1e-6 >= positioned


def test_jamba_continuation_of_several_tokens_starts_from_a_zero_state():
    """Jamba's stock forward of several tokens on a cache ignores the cached recurrent state (its
    scan starts at zero): it departs from the full forward, one step per token does not."""
    m, gen = model("JambaForCausalLM"), generator("jamba")
    ids = torch.randint(3, VOCAB, (20,), generator=gen).tolist()
    with torch.no_grad():
        cache = prefilled(m, ids[:14])
        several = reference.stock(m, torch.tensor(ids[14:]), cache, 14).logits[0, -1]
    gap = (several - full_logits(m, ids)).abs().max().item()
    stepped = (decode_logits(m, ids, 14) - full_logits(m, ids)).abs().max().item()
    print(f"Jamba: several tokens on a cache {gap:.1e}, one step per token {stepped:.1e}")
    assert gap > 1e4 * max(stepped, 1e-16), "the continuation agrees: Jamba's scan may now take the cached state"


@pytest.mark.parametrize("name", CLASSES)
def test_the_naive_verify_is_exact_before_the_first_branch_and_leaks_after(name):
    m, gen = model(name), generator("naive", name)
    prefix = torch.randint(3, VOCAB, (9,), generator=gen).tolist()
    tree = _rooted(random_tree("random", 16, VOCAB, gen), prefix[-1])
    with torch.no_grad():
        logits, _ = reference.verify_naive(m, prefilled(m, prefix[:-1]), len(prefix) - 1, tree, (0,))
    errors = []
    for i in range(len(tree)):
        ids = prefix + tree.tokens[tree.path_to(i)][1:].tolist()
        errors.append((logits[i] - decode_logits(m, ids, len(prefix) - 1)).abs().max().item())
    first_branch = next(i for i in range(len(tree)) if tree.path_to(i) != list(range(i + 1)))
    print(f"{name}: up to node {first_branch - 1} max |dlogit| {max(errors[:first_branch]):.1e}, "
          f"then {max(errors[first_branch:]):.1e}")
    before = max(errors[:first_branch]) <= 1e-6 * max(1.0, logits.abs().max().item())
    assert before == (name not in STOCK_CONTINUATION_DEPARTS)
    assert max(errors[first_branch:]) > 1e-4


@pytest.mark.parametrize("name", CLASSES)
def test_verify_accept_commit_rounds_equal_ar(name):
    """Trees with AR's own continuation planted on one branch (random siblings around it): the
    fork's greedy walk accepts a prefix of it, commits the accepted node's cache, and the tokens
    equal AR's."""
    m, gen = model(name), generator("rounds", name)
    prompt = torch.randint(3, VOCAB, (8,), generator=gen).tolist()
    ar = decode_ids(m, prompt, 20)
    cache, out, root = prefilled(m, prompt[:-1]), [], prompt[-1]
    with torch.no_grad():
        while len(out) < 20:
            tree = _planted(root, ar[len(out):len(out) + 4], gen)
            logits, _, caches = reference.verify_fork(m, cache, len(prompt) - 1 + len(out), tree, (0,))
            path, bonus = accept(tree, logits.argmax(-1))
            out += tree.tokens[path][1:].tolist() + [bonus]
            cache, root = caches[path[-1]], bonus
    assert out[:20] == ar


def decode_ids(m, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens of the stock AR decode."""
    ids = list(prompt)
    with torch.no_grad():
        out = reference.stock(m, torch.tensor(ids), None, 0)
        for _ in range(n):
            ids.append(int(out.logits[0, -1].argmax()))
            out = reference.stock(m, torch.tensor(ids[-1:]), out.past_key_values, len(ids) - 1)
    return ids[len(prompt):]


def _rooted(tree: DraftTree, root: int) -> DraftTree:
    """``tree`` with ``root`` as its root token."""
    tokens = tree.tokens.clone()
    tokens[0] = root
    return DraftTree(tokens, tree.parents, tree.depths, tree.log_weights)


def _planted(root: int, truth: list[int], gen) -> DraftTree:
    """A tree: a chain of ``truth`` cut at a random depth, and a random sibling beside each of its
    nodes (before it at odd depths, after it at even ones)."""
    tokens, parents, depths, at = [root], [-1], [0], 0
    keep = int(torch.randint(1, len(truth) + 1, (1,), generator=gen))
    for d, t in enumerate(truth[:keep], 1):
        wrong = int(torch.randint(3, VOCAB, (1,), generator=gen))
        chain_node = at
        for tok, on_chain in ([(wrong, False), (t, True)] if d % 2 else [(t, True), (wrong, False)]):
            if on_chain or tok != t:
                tokens.append(tok)
                parents.append(at)
                depths.append(d)
                chain_node = len(tokens) - 1 if on_chain else chain_node
        at = chain_node
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths),
                     torch.zeros(len(tokens), dtype=torch.float64))


# ----------------------------------------------------------------------------- the fast loop

@functools.lru_cache(maxsize=None)
def pair32(name: str):
    """(float32 target loaded from its directory, a 1-layer random drafter sized for it, block 6)."""
    m = load_target(saved(name))
    cfg = DrafterConfig.for_target(m, mask_token_id=VOCAB - 1, num_layers=1, block_size=6)
    torch.manual_seed(1)
    return m, DFlashDrafter.from_config(cfg, m).eval()


@pytest.mark.parametrize("name", CLASSES)
def test_generate_equals_ar_in_every_exact_mode_and_leaks_or_not_in_naive(name):
    """The fast loop (the family's one-pass tree form; MiniMax: the specification, loudly) with a
    drafter nudged toward AR's own continuation, so rounds accept several tokens and reject some."""
    m, drafter = pair32(name)
    prompt = torch.randint(3, VOCAB - 1, (9,), generator=generator("prompt", name)).tolist()
    ar = generate(m, None, prompt, method="ar", max_new_tokens=20)
    hinted = drafter if name == "MiniMaxForCausalLM" else HintedDrafter(drafter, prompt + ar.tokens)
    for mode in ("wy", "fork"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = generate(m, hinted, prompt, method="ddtree", budget=8, block_size=6, max_new_tokens=20, gdn_mode=mode)
        assert out.tokens == ar.tokens, mode
    if name != "MiniMaxForCausalLM":
        assert max(out.acceptance_lengths) > 1 and len(out.acceptance_lengths) < len(ar.tokens)


@pytest.mark.parametrize("T", [0.0, 0.8], ids=["T0", "T0.8"])
@pytest.mark.parametrize("name", sorted(set(CLASSES) - {"MiniMaxForCausalLM"}))
def test_the_fast_loop_equals_the_specification(name, T):
    """Tokens, acceptance lengths and tree sizes of ``generate`` (the family's one-pass form)
    against ``reference_generate`` (the fork by stock steps), greedy and seeded."""
    m, drafter = pair32(name)
    prompt = torch.randint(3, VOCAB - 1, (9,), generator=generator("spec", name)).tolist()
    spec = dict(method="ddtree", budget=8, block_size=6, max_new_tokens=16, temperature=T, seed=3)
    fast, ref = generate(m, drafter, prompt, **spec), reference_generate(m, drafter, prompt, **spec)
    assert (fast.tokens, fast.acceptance_lengths, fast.tree_sizes) == (ref.tokens, ref.acceptance_lengths, ref.tree_sizes)


def test_minimax_runs_the_specification_and_says_so_once(monkeypatch):
    m, drafter = pair32("MiniMaxForCausalLM")
    assert not fast_loop_covers(m)
    monkeypatch.setattr(decode, "_WARNED", [])
    with pytest.warns(UserWarning, match="MiniMaxLightningAttention: generating with the specification"):
        generate(m, drafter, [5, 6, 7], method="ddtree", budget=4, block_size=6, max_new_tokens=4)


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_check_lossless_at_t_above_zero(name):
    m, drafter = pair32(name)
    prompts = [torch.randint(3, VOCAB - 1, (7,), generator=generator("lossless", name, i)).tolist() for i in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check_lossless(m, drafter, prompts, method="ddtree", budget=6, block_size=6, temperature=0.8,
                                samples=160)
    print(report.text())
    assert report.passed
