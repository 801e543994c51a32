"""``reference_generate`` is the specification: ``generate`` and ``generate_batch`` equal it in
tokens, acceptance lengths and tree sizes (entropies to float rounding), on both shipped pairs,
for AR, DFlash and DDTree (unary marginals, DFlash 2's conditional trees), every GDN mode,
at T = 0 and seeded T > 0. The fast lane runs a spread of the grid; ``slow`` runs the rest."""
import ast
import functools
from pathlib import Path

import pytest
import torch

from ddtree_lab import GenerationSpec, generate, generate_batch, load_pair, reference_generate
from ddtree_lab.core import reference
from helpers import assert_close

NEW, BUDGET, SEED = 24, 16, 3
SAMPLINGS = ((0.0, "rejection"), (0.8, "rejection"), (0.8, "target"))


@functools.lru_cache(maxsize=None)
def pair(arch: str, drafter: str = "dflash"):
    return load_pair(arch, drafter=drafter)


def prompts(arch: str) -> list[list[int]]:
    """Two HumanEval prompts, cut short (40 and 25 tokens)."""
    return [pair(arch).prompt_ids(0)[:40], pair(arch).prompt_ids(1)[:25]]


def case(arch, drafter, method, tree=None, mode="wy", T=0.0, rule="rejection", marks=()):
    """A pytest param (arch, drafter kind, spec keyword arguments) with a readable id."""
    spec = dict(method=method, budget=BUDGET, tree=tree, gdn_mode=mode, temperature=T, accept_rule=rule,
                max_new_tokens=NEW, seed=SEED)
    name = f"{arch}-{method}" if method == "ar" else f"{arch}-{drafter}-{method}-{tree or 'own'}-{mode}"
    return pytest.param(arch, drafter, spec, id=f"{name}-T{T}" + (f"-{rule}" if T else ""), marks=marks)


FAST = [case("gdn", "dflash", "ar"), case("mla", "dflash", "ar", T=0.8),
        case("gdn", "dflash", "dflash"), case("gdn", "dflash", "ddtree"),
        case("gdn", "dflash", "ddtree", mode="fork", T=0.8),
        case("gdn", "dflash2", "ddtree", T=0.8), case("gdn", "dflash2", "dflash", mode="fork"),
        case("mla", "dflash", "ddtree", T=0.8, rule="target"),
        case("mla", "dflash2", "ddtree"), case("mla", "dflash2", "dflash", T=0.8)]
GRID = [case(arch, "dflash", "ar", T=T, rule=rule) for arch in ("gdn", "mla") for T, rule in SAMPLINGS] + [
    case(arch, drafter, method, tree, mode, T, rule)
    for arch in ("gdn", "mla") for drafter, tree in (("dflash", None), ("dflash2", None), ("dflash2", "unary"))
    for method in ("dflash", "ddtree") for mode in (("wy", "fork", "naive") if arch == "gdn" else ("wy", "naive"))
    for T, rule in SAMPLINGS]
SLOW = [pytest.param(*p.values, id=p.id, marks=pytest.mark.slow) for p in GRID if p.id not in {f.id for f in FAST}]


def assert_same(name: str, fast, ref) -> None:
    """Tokens, acceptance lengths and tree sizes equal; entropies equal to float rounding."""
    assert fast.tokens == ref.tokens, f"{name}: tokens\n{fast.tokens}\n{ref.tokens}"
    assert fast.acceptance_lengths == ref.acceptance_lengths, f"{name}: acceptance lengths"
    assert fast.tree_sizes == ref.tree_sizes, f"{name}: tree sizes"
    assert_close(f"{name} entropies", torch.tensor(ref.entropies), torch.tensor(fast.entropies), 1e-5)


@pytest.mark.parametrize("arch,drafter,spec", FAST + SLOW)
def test_generate_equals_the_reference(arch, drafter, spec):
    p = pair(arch, drafter)
    d = None if spec["method"] == "ar" else p.drafter
    ref = reference_generate(p.target, d, prompts(arch)[0], **spec)
    assert_same(f"{arch} {spec}", generate(p.target, d, prompts(arch)[0], **spec), ref)
    assert len(ref.tokens) == NEW
    if spec["method"] != "ar":
        print(f"tau {ref.tau:.2f} over {len(ref.acceptance_lengths)} rounds")
        assert ref.tau > 1, "no draft token was ever accepted: the comparison would be vacuous"


@pytest.mark.parametrize("arch,drafter,spec", [case("gdn", "dflash", "ddtree", T=0.8),
                                                case("mla", "dflash2", "ddtree", mode="naive"),
                                                case("gdn", "dflash", "ar", T=0.8, marks=pytest.mark.slow),
                                                case("gdn", "dflash2", "dflash", mode="fork", marks=pytest.mark.slow)])
def test_generate_batch_equals_the_reference_per_prompt(arch, drafter, spec):
    """Prompt b of a batch samples with seed + b: the reference of that prompt with that seed."""
    p = pair(arch, drafter)
    d = None if spec["method"] == "ar" else p.drafter
    gens = generate_batch(p.target, d, prompts(arch), **spec)
    for b, (prompt, fast) in enumerate(zip(prompts(arch), gens)):
        assert_same(f"prompt {b}", fast, reference_generate(p.target, d, prompt, **{**spec, "seed": SEED + b}))


def test_the_naive_leak_and_its_replay_are_part_of_the_spec(monkeypatch):
    """GDN naive mode reads the tree as a chain in ONE stock forward: the reference leaks as the
    fast loop does (its output departs from AR's), and commits by replaying the accepted tokens
    as a chain from the snapshot, once per round."""
    p, prompt = pair("gdn"), prompts("gdn")[0]
    spec = dict(method="ddtree", budget=BUDGET, gdn_mode="naive", max_new_tokens=NEW)
    replays = []
    replay = reference.replay
    monkeypatch.setattr(reference, "replay", lambda *a: replays.append(1) or replay(*a))
    ref = reference_generate(p.target, p.drafter, prompt, **spec)
    assert len(replays) == len(ref.acceptance_lengths)
    assert ref.tokens != generate(p.target, None, prompt, method="ar", max_new_tokens=NEW).tokens
    assert_same("naive", generate(p.target, p.drafter, prompt, **spec), ref)


class LinearCost:
    """A cost model for budget "auto": a round costs 20 + tokens (ms), up to 32 nodes."""
    max_budget = 32

    def batch_round_seconds(self, tokens: torch.Tensor, batch: int) -> torch.Tensor:
        return 1e-3 * (20 + tokens.double())


def test_auto_budget_equals_the_reference():
    p, prompt = pair("gdn"), prompts("gdn")[0]
    spec = dict(method="ddtree", budget="auto", max_new_tokens=NEW)
    ref = reference_generate(p.target, p.drafter, prompt, cost_model=LinearCost(), **spec)
    assert_same("auto", generate(p.target, p.drafter, prompt, cost_model=LinearCost(), **spec), ref)
    assert 1 <= min(ref.tree_sizes) and max(ref.tree_sizes) <= LinearCost.max_budget


def test_the_reference_takes_a_spec_and_refuses_what_generate_refuses():
    p, prompt = pair("mla"), prompts("mla")[0]
    spec = GenerationSpec(method="dflash", max_new_tokens=8)
    assert reference_generate(p.target, p.drafter, prompt, spec).tokens == generate(p.target, p.drafter, prompt, spec).tokens
    for bad in (dict(budget=0), dict(max_new_tokens=[4, 4]), dict(block_size=99)):
        with pytest.raises(ValueError):
            reference_generate(p.target, p.drafter, prompt, **bad)


# what the specification may import: tree rules, walks, sampling, the spec, the drafter call
SPEC_IMPORTS = {"__future__", "copy", "time", "torch", "transformers", ".allocate", ".conditional", ".drafter",
                ".rules", ".spec", ".tree"}


def test_the_specification_stands_alone_on_one_page():
    """At most 250 lines, and no import of the fast path (verify, decode, adapter,
    compiled, harness, the GDN modules, the recurrent families): read from its syntax tree."""
    source = Path(reference.__file__).read_text()
    assert len(source.splitlines()) <= 250
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported <= SPEC_IMPORTS, f"the specification imports {sorted(imported - SPEC_IMPORTS)}"
    for name in ("verify", "cache", "decode", "batched", "adapter", "compiled", "harness", "gdn_", "families"):
        assert not any(name in m for m in imported), name
