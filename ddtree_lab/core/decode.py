"""The speculative decoding loop: AR, DFlash (linear draft) and DDTree (draft tree), over a batch.

One round (DFlash, arXiv 2602.06036, section 3; DDTree, arXiv 2604.12989, sections 3-4), for
the B sequences still running (docs/background.md section 7):

1. draft: ``DFlashDrafter.draft_batch``: ONE drafter forward over every sequence's new
   context rows and block;
2. tree: per sequence a chain (DFlash) or a tree (DDTree), by the spec's tree rule
   (``rules.TreeRule``: a built-in or one's own, whose trees ``rules.check_tree`` checks), each
   with its own budget, or with ``budget="auto"`` the budgets chosen jointly (``allocate.auto_trees``);
3. verify: ``verify.verify_batch``, ONE target forward over every tree;
4. accept per sequence (its own argmax, or its own seeded walk at T > 0);
5. ragged commit: ``verify.commit_batch``, each sequence its own accepted path (target cache
   and drafter context advance by the path and the bonus); finished sequences leave the batch.

No full re-forward of the sequence per round. ``generate`` is the batch of one. At T = 0 the
output equals AR decoding token for token (exact verification modes), whatever the tree rule.
At T > 0 ``accept_rule`` is the walk (``rules.Walk``; ``sampling``): "rejection" (default,
DFlash's rule: draft tokens sampled from the drafter's q, accepted with min(1, p/q), residual
on rejection, recursively over a node's children for trees), "target" (deterministic draft,
the walk follows the target's own sample at every node) or a walk of one's own. Both built-ins
are lossless; sequence b samples with its own generator (seed + b), so its output does not
depend on the rest of the batch.
"""
from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass, field, replace

import torch

from . import tree as tree_mod
from .allocate import auto_trees, auto_with_chain, chain_candidate
from .compiled import compiled_module, compiled_tree_forward
from .drafter import Draft, DrafterState
from .rules import TreeRule, check_tree
from .rules import choose_tokens  # noqa: F401  (decode.choose_tokens: the AR loops' name for it)
from .spec import (PHASES, Generation, GenerationSpec, Sampling, check_generate_args, entropies, round_rule,  # noqa: F401
                   token_ids, tree_rule)
from .verify import (TreeCache, commit_batch, loop_ready, padded_prefill, prefill_batch, recurrent_mixers, runs_in_fast_loop,
                     tree_forward, verify_batch_unchecked)


_CUDA = torch.cuda.is_available()


def device_sync() -> None:
    """Wait for queued GPU work, so a host timer measures it (a no-op on the CPU)."""
    if _CUDA:
        torch.cuda.synchronize()


class timed_phase:
    """``with timed_phase(gen, phase):`` adds the seconds of the block to ``gen.timings[phase]``
    (device-synced at both ends). A class, not a generator: five of them open every round."""
    __slots__ = ("timings", "phase", "start")

    def __init__(self, gen: Generation, phase: str):
        self.timings, self.phase = gen.timings, phase

    def __enter__(self) -> None:
        device_sync()
        self.start = time.perf_counter()

    def __exit__(self, *exc) -> None:
        device_sync()
        self.timings[self.phase] += time.perf_counter() - self.start


@torch.inference_mode()
def generate(target, drafter, prompt_ids, spec: GenerationSpec | None = None, *, cost_model=None,
             on_round=None, **spec_args) -> Generation:
    """Generate after ``prompt_ids`` as ``spec`` says (a ``GenerationSpec``, or its fields as
    keyword arguments: method, budget, block_size, max_new_tokens, temperature, accept_rule,
    seed, tree, gdn_mode, compile): the batch of one of ``generate_batch``. compile: the same
    loop on compiled copies of its forwards (``compiled``; the first call builds the graphs).

    budget: draft nodes per DDTree round, or "auto" (per round, maximise expected tokens
    per predicted second with ``cost_model``, see ``allocate.auto_trees``).
    on_round: optional callback ``on_round(Round)`` after every speculative round (for
    calibration and leakage studies; not timed apart from the loop).
    accept_rule: the T > 0 walk, a name of ``rules.ACCEPT_RULES`` ("rejection": DFlash's rule
    with the drafter's q; "target": target-only matching) or a walk of one's own
    (``rules.Walk``); ignored at T = 0 (the argmax walk).
    tree: a tree rule, "unary" / "conditional" (``rules.TREES``) or any callable
    rule(draft, root_token, budget) -> DraftTree (``rules``); None: the drafter's own (a DFlash 2
    drafter builds conditional trees, ``rules.drafters_own``).
    """
    spec = GenerationSpec.build(spec, **spec_args)
    if isinstance(spec.budget, tuple) or isinstance(spec.max_new_tokens, tuple):
        raise ValueError("generate takes one budget and one max_new_tokens (per-prompt lists: generate_batch)")
    prompt = check_generate_args(target, drafter, prompt_ids, spec, spec.budget, spec.max_new_tokens,
                                 cost_model=cost_model)
    return _decode(target, drafter, [prompt], spec, cost_model=cost_model, on_round=on_round)[0]


@torch.inference_mode()
def generate_batch(target, drafter, prompts, spec: GenerationSpec | None = None, *, cost_model=None,
                   on_round=None, **spec_args) -> list[Generation]:
    """``generate`` for a batch of prompts (any lengths): one Generation per prompt.

    budget, max_new_tokens: one int, or a list with one per prompt; budget "auto" (DDTree):
    every round the budgets are chosen jointly with ``cost_model`` (``batch_round_seconds``,
    ``max_budget``: see ``allocate.auto_trees``). on_round, accept_rule, tree: as ``generate``
    (every ``Round`` names its ``sequence``). Sequence b samples with its own generator seeded
    ``seed + b`` (T > 0). timings: the batch's seconds per phase, shared by the batch (a
    Generation's ``tokens_per_s`` is its own tokens over the batch's seconds:
    ``batch_tokens_per_s`` gives the batch's).
    """
    spec = GenerationSpec.build(spec, **spec_args)
    prompts = check_generate_batch_args(target, drafter, prompts, spec, cost_model)
    return _decode(target, drafter, prompts, spec, cost_model=cost_model, on_round=on_round)


def batch_tokens_per_s(gens: list[Generation]) -> float:
    """The batch's throughput: every sequence's new tokens over the batch's wall seconds."""
    return sum(len(g.tokens) for g in gens) / max(gens[0].timings["total"], 1e-12)


def _decode(target, drafter, prompts, spec: GenerationSpec, *, cost_model, on_round) -> list[Generation]:
    """The checked prompts and spec -> one Generation per prompt; every one carries the batch's timings."""
    budgets, news = spec.per_prompt(len(prompts))
    if not fast_loop_covers(target):
        return _decode_by_specification(target, drafter, prompts, spec, budgets, news, cost_model=cost_model,
                                        on_round=on_round)
    s = spec.sampling
    rngs = [torch.Generator().manual_seed(s.seed + b) if not s.greedy else None for b in range(len(prompts))]
    clock = Generation()  # holds the batch's timings
    with loop_ready(target):
        t0 = time.perf_counter()
        if spec.method == "ar":
            gens = _generate_ar(target, prompts, news, s.temperature, rngs, clock,
                                forward=_forwards(target, None, spec).ar)
        else:
            seqs = [_Sequence(b, None, None, None, 0, budget, new, rng)
                    for b, (budget, new, rng) in enumerate(zip(budgets, news, rngs))]
            _generate_spec(target, drafter, prompts, seqs, spec, clock, hooks=_Hooks(cost_model, on_round))
            gens = [s.gen for s in seqs]
        clock.timings["total"] = time.perf_counter() - t0
    for g, n in zip(gens, news):
        g.tokens, g.entropies, g.timings = g.tokens[:n], g.entropies[:n], dict(clock.timings)
    return gens


def fast_loop_covers(target) -> bool:
    """Whether this loop runs every layer of ``target``: softmax attention, the GDN classes the
    batched layers (``verify.batched_mixers``) and every family whose layers it routes to their
    one-pass tree form (``verify.runs_in_fast_loop``: all but MiniMax's lightning attention,
    whose forward refuses any cache but its own). Otherwise ``generate`` runs the specification."""
    return all(runs_in_fast_loop(fam) for _, fam in recurrent_mixers(target).values())


def _decode_by_specification(target, drafter, prompts, spec, budgets, news, *, cost_model, on_round) -> list[Generation]:
    """The loud fallback: prompt by prompt, ``reference.reference_generate`` (exact, lossless, one
    stock step per tree node), sequence b seeded ``seed + b`` as this loop seeds it."""
    names = sorted({type(m).__name__ for m, _ in recurrent_mixers(target).values()})
    if on_round is not None:
        raise ValueError(f"on_round needs the fast loop, which does not yet run {', '.join(names)}")
    if names not in _WARNED:
        _WARNED.append(names)
        warnings.warn(f"the fast loop does not yet run {', '.join(names)}: generating with the specification "
                      f"(core/reference.py: exact and lossless, one stock step per tree node, slow)", stacklevel=3)
    from .reference import reference_generate  # late: the specification imports spec, which decode re-exports
    gens = [reference_generate(target, drafter, p, replace(spec, budget=b, max_new_tokens=n,
                                                           sampling=replace(spec.sampling, seed=spec.sampling.seed + i)),
                               cost_model=cost_model)
            for i, (p, b, n) in enumerate(zip(prompts, budgets, news))]
    total = sum(g.timings["total"] for g in gens)
    for g in gens:
        g.timings["total"] = total
    return gens


_WARNED: list = []


@dataclass(frozen=True)
class _Forwards:
    """The per-round forwards a generation calls: the AR step (the target), the verify
    (``verify.tree_forward``) and the drafter's block forward (None: its own); eager, or
    compiled copies (``spec.compile``, see ``compiled``)."""
    ar: object
    verify: object
    draft: object


def _forwards(target, drafter, spec: GenerationSpec) -> _Forwards:
    if not spec.compile:
        return _Forwards(target, tree_forward, None)  # None: the drafter's own block forward
    return _Forwards(compiled_module(target), compiled_tree_forward(),
                     None if drafter is None else compiled_module(drafter.model))


@dataclass(frozen=True)
class _Hooks:
    """What a generation is handed beside its spec: the cost model of budget "auto" and the
    per-round callback."""
    cost_model: object = None
    on_round: object = None


def check_generate_batch_args(target, drafter, prompts, spec: GenerationSpec, cost_model=None) -> list:
    """Validate the prompts against ``spec`` and the models before any work: -> prompts as LongTensor[T_b]."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of token id sequences, got {type(prompts).__name__}"
                         + (" of length 0" if isinstance(prompts, (list, tuple)) else ""))
    budgets, news = spec.per_prompt(len(prompts))
    checked = []
    for b, prompt in enumerate(prompts):
        if isinstance(prompt, (int, float)) or (isinstance(prompt, torch.Tensor) and prompt.dim() == 0):
            raise ValueError(f"prompts[{b}] must be a sequence of token ids (prompts is a list of prompts), "
                             f"got the scalar {prompt!r}")
        try:
            checked.append(check_generate_args(target, drafter, prompt, spec, budgets[b], news[b],
                                               cost_model=cost_model))
        except ValueError as err:
            raise ValueError(f"prompts[{b}]: {err}") from None
    if spec.method != "ar" and spec.budget == "auto" and len(prompts) > 1 and not hasattr(cost_model, "batches"):
        raise ValueError("budget='auto' over a batch needs a cost_model measured over batches (with ``batches``: "
                         "ddtree_lab.experiments.plumbing.costs.batch_cost_model), got "
                         f"{type(cost_model).__name__}")
    return checked


def _generate_ar(target, prompts, news, temperature, rngs, clock: Generation, *, forward) -> list[Generation]:
    """AR on the stock forward (``forward``: the target or its compiled copy) and
    ``DynamicCache``: one target forward per token for the whole
    batch. Prompts of different lengths are left-padded, with a 2-D attention mask and
    per-sequence positions (equal lengths need neither: batch 1 is the plain loop). Every row
    runs until the longest sequence is done (the stock Qwen3.5 linear-attention cache layer has
    no ``batch_select_indices``); extra tokens of finished rows are dropped."""
    device = next(target.parameters()).device
    gens = [Generation() for _ in prompts]
    with timed_phase(clock, "prefill"):
        out, cache, mask = padded_prefill(target, prompts)
        logits = out.logits[:, -1]  # [B, V]
    padded = not bool(mask.all())
    positions = mask.sum(-1, keepdim=True)  # [B, 1] position of the next token
    for step in range(max(news)):
        tokens = (logits.argmax(-1) if temperature == 0 else  # [B]
                  torch.stack([choose_tokens(logits[b:b + 1], temperature, rng)[0] for b, rng in enumerate(rngs)]))
        for g, token, h in zip(gens, tokens.tolist(), entropies(logits, temperature)):
            g.tokens.append(token)
            g.entropies.append(h)
            g.acceptance_lengths.append(1)
            g.tree_sizes.append(0)
        if step + 1 == max(news):
            break
        with timed_phase(clock, "verify"):
            mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)  # [B, P + step + 1]
            logits = forward(tokens[:, None].to(device), attention_mask=mask if padded else None,
                            position_ids=positions + step if padded else None,
                            past_key_values=cache, use_cache=True).logits[:, -1]
    return gens


def sampled(tree: tree_mod.DraftTree, proposal, sampling: Sampling, rng):
    """The tree the round verifies: under a walk that draws its tree (the rejection walk) at
    T > 0 its tokens are drawn from the drafter's q (``proposal.sample_tree``), else the
    rule's tree itself."""
    if sampling.draws_tree:
        return proposal.sample_tree(tree, sampling.temperature, rng)
    return tree


def accept_round(tree, target_logits, proposal, sampling: Sampling, rng, choice=None):
    """(path, bonus, choice): the round's accept walk. At T = 0 the argmax walk, whatever the
    walk: choice [N+1] is the target's argmax at every node (given: the verify's,
    ``Forward.choice``). At T > 0 the spec's walk (``Sampling.accept_rule``); choice None."""
    if sampling.greedy:
        choice = target_logits.argmax(-1) if choice is None else choice
        return (*tree_mod.accept(tree, choice), choice)
    return (*sampling.accept_rule(tree, target_logits, proposal, sampling.temperature, rng), None)


@dataclass(frozen=True, eq=False)
class Round:
    """What one speculative round saw, for one sequence (``sequence``: its index in the batch):
    draft logits [bs-1, V], the tree, the target's logits [N+1, V] and argmax choices [N+1]
    (T = 0), the accepted path, the bonus token and the drafter's q (``proposal``:
    ``rule.proposal(draft)``, e.g. ``rules.Marginal`` or ``Conditional``)."""
    draft_logits: torch.Tensor
    tree: tree_mod.DraftTree
    target_logits: torch.Tensor
    target_choice: torch.Tensor | None  # None at T > 0 (the walk samples on its own)
    path: list
    bonus: int
    proposal: object = None
    sequence: int = 0


@dataclass(eq=False)
class _Sequence:
    """One running sequence: its index in the batch, its cache, drafter state, the features of
    the rows committed since its last round [n, F], its next root token, its budget and its
    output."""
    index: int
    cache: TreeCache
    dstate: DrafterState
    features: torch.Tensor
    root: int
    budget: int | str
    max_new_tokens: int
    rng: torch.Generator | None
    gen: Generation = field(default_factory=Generation)


def start(target, drafter, prompt: torch.Tensor) -> tuple:
    """Open a speculative generation of ``prompt`` [T]: prefill prompt[:-1] -> (target cache,
    features [T-1, F] of those rows for the drafter, root = prompt[-1], the first round's
    last committed token). ``start_batch`` of one."""
    return start_batch(target, drafter, [prompt])[0]


def start_batch(target, drafter, prompts: list[torch.Tensor]) -> list[tuple]:
    """``start`` of every prompt [T_b], their prefills in one batched forward (``prefill_batch``)."""
    opened = prefill_batch(target, [p[:-1] for p in prompts], feature_layers=tuple(drafter.cfg.target_layer_ids))
    return [(cache, features, int(p[-1])) for (cache, features), p in zip(opened, prompts)]


@dataclass(frozen=True, eq=False)
class Opening:
    """A speculative generation opened on a prompt [T] (``first_draft``): the target cache of
    prompt[:-1], the features [T-1, F] of those rows, the root token prompt[-1], the drafter
    state after the first block and that block (``drafter.Draft``: logits [bs-1, V])."""
    cache: TreeCache
    features: torch.Tensor
    root: int
    state: DrafterState
    draft: Draft


def first_draft(target, drafter, prompt, block_size: int) -> Opening:
    """``start`` plus the first proposal: the round-0 state every study of one block starts from."""
    cache, features, root = start(target, drafter, torch.as_tensor(prompt, dtype=torch.long).reshape(-1))
    state = drafter.new_state()
    return Opening(cache, features, root, state, drafter.draft(state, features, root, block_size))


def _open(target, drafter, seqs: list[_Sequence], prompts) -> None:
    """Prefill every prompt (``start_batch``) into its ``seq`` and open its drafter state."""
    for seq, opened in zip(seqs, start_batch(target, drafter, prompts)):
        seq.cache, seq.features, seq.root = opened
        seq.dstate = drafter.new_state()


def _generate_spec(target, drafter, prompts, seqs: list[_Sequence], spec: GenerationSpec, clock: Generation,
                   *, hooks: _Hooks) -> None:
    """The speculative loop over ``seqs`` (one per prompt, filled in place): rounds until every
    sequence has its ``max_new_tokens``. Everything was validated before: nothing per round."""
    layers, s = tuple(drafter.cfg.target_layer_ids), spec.sampling
    rule = round_rule(tree_rule(drafter, spec.tree), spec.method)
    forwards = _forwards(target, drafter, spec)
    with timed_phase(clock, "prefill"):
        _open(target, drafter, seqs, prompts)
    running = list(seqs)
    while running:
        with timed_phase(clock, "draft"):
            drafts = drafter.draft_batch([q.dstate for q in running], [q.features for q in running],
                                         [q.root for q in running], spec.block_size,
                                         forward=forwards.draft)  # Draft each, logits [bs-1, V]
            proposals = [rule.proposal(d) for d in drafts]
        with timed_phase(clock, "tree"):
            built = draft_trees(drafts, running, spec, hooks.cost_model, rule, target.config.vocab_size)
            trees = [sampled(t, q, s, seq.rng) for t, q, seq in zip(built, proposals, running)]
        with timed_phase(clock, "verify"):
            outs = verify_batch_unchecked(target, [q.cache for q in running], trees, spec.gdn_mode, layers,
                                          forward=forwards.verify, greedy=s.greedy)
        with timed_phase(clock, "accept"):
            # every sequence walks its own tree with its own generator: lossless per sequence
            # whatever the other sequences of the batch accept
            walks = [accept_round(t, o.logits, q, s, seq.rng, o.choice)
                     for t, o, q, seq in zip(trees, outs, proposals, running)]
        with timed_phase(clock, "commit"):
            commit_batch(target, [q.cache for q in running], [o.pending for o in outs], [path for path, _, _ in walks],
                         checked=True)
            for seq, o, (path, bonus, _) in zip(running, outs, walks):
                seq.features, seq.root = _rows(o.features, path), bonus
        path_logits = [_rows(o.logits, path) for o, (path, _, _) in zip(outs, walks)]
        for seq, d, t, o, q, (path, bonus, choice), h in zip(running, drafts, trees, outs, proposals, walks,
                                                              _split(batch_entropies(path_logits, s.temperature),
                                                                     [len(w[0]) for w in walks])):
            _record(seq.gen, t, path, bonus, h)
            if hooks.on_round is not None:
                hooks.on_round(Round(d.logits, t, o.logits, choice, path, bonus, q, seq.index))
        running = [q for q in running if len(q.gen.tokens) < q.max_new_tokens]


def _rows(x: torch.Tensor, path: list[int]) -> torch.Tensor:
    """x[path] for a root path of node indices: a view when they are the first rows (a chain,
    or a tree's main path), else a gather."""
    return x[:len(path)] if tree_mod.leading_rows(path) else x[path]


def _split(values: list, sizes: list[int]) -> list[list]:
    """``values`` cut into consecutive lists of ``sizes``."""
    ends = list(itertools.accumulate(sizes))
    return [values[end - n:end] for n, end in zip(sizes, ends)]


def batch_entropies(logits: list[torch.Tensor], temperature: float) -> list[float]:
    """``entropies`` of every row of the tensors ``logits`` [n_b, V], in order, in one call."""
    return entropies(logits[0] if len(logits) == 1 else torch.cat(logits), temperature)


def _record(gen: Generation, tree, path, bonus: int, path_entropies: list[float]) -> None:
    """Append one round's accepted tokens, their entropies (of the rows they came from), its
    acceptance length and tree size."""
    gen.tokens += _rows(tree.tokens, path)[1:].tolist() + [bonus]
    gen.entropies += path_entropies
    gen.acceptance_lengths.append(len(path))
    gen.tree_sizes.append(tree.num_nodes)


def draft_trees(drafts: list, running: list[_Sequence], spec: GenerationSpec, cost_model, rule: TreeRule,
                vocab_size: int) -> list:
    """One tree per running sequence by ``rule`` (``round_rule``): its own budget (DFlash: the
    block's block_size - 1 positions), or (DDTree, budget "auto") budgets chosen jointly for
    this round's batch by ``auto_trees`` (each tree built once at the cost model's largest
    budget, then cut to one common size: the cost model prices a round by its tokens, not by the
    largest tree every sequence's recurrence and attention pay for in a packed verify; the
    per-sequence allocation, ``padded=False``, was slower on GDN under load). A batch of one
    whose cost model prices the chain also weighs the chain (``allocate.auto_with_chain``). A rule's trees
    are checked (``rules.check_tree``) unless they are valid by construction (``checked``)."""
    roots, auto = [s.root for s in running], spec.method == "ddtree" and running[0].budget == "auto"
    if auto and chain_candidate(cost_model, rule, len(drafts)):  # the chain is one of auto's candidates
        return [auto_with_chain(drafts[0], roots[0], rule, cost_model)]
    budgets = ([cost_model.max_budget] * len(drafts) if auto else
               [spec.block_size - 1 if spec.method == "dflash" else s.budget for s in running])
    trees = rule.trees(drafts, roots, budgets)
    if not rule.checked:
        for t, root, budget in zip(trees, roots, budgets):
            check_tree(t, root, budget, spec.block_size - 1, vocab_size, f"tree rule {rule.name!r}")
    return auto_trees(trees, cost_model) if auto else trees
