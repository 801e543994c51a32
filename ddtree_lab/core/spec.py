"""One generation spec: what a ``decode.generate`` call decodes, validated once when it is built.

``GenerationSpec`` (frozen) holds the method, the budget, the block size, the length, the
sampling (``Sampling``: temperature with its acceptance walk and the seed), the tree rule and
the GDN mode, each as its object (a built-in's name is looked up once, here; a callable of
one's own is wrapped, ``rules``). It checks everything it can without the models; what
needs the models (the drafter's block size, the vocabulary, the positions) is checked once
per generation in ``decode.check_generate_args``. Nothing in the loop validates again.
Also here: the verification mode a verify runs the recurrent layers in (``GdnMode`` /
``NaiveMode`` / ``ForkMode``, ``gdn_mode``), a policy; each family holds its maths.

    spec = GenerationSpec(method="ddtree", budget=16)                  # or generate(..., budget=16)
    spec = GenerationSpec(method="ddtree", budget=64, sampling=Sampling(0.7, seed=3))
    spec = GenerationSpec(method="ddtree", budget=16, tree=my_rule)    # my_rule(draft, root_token, budget)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

import torch

from .rules import TreeRule, Walk, as_rule, as_walk, drafters_own
from .tree import chain_parents

MODE_NAMES = ("naive", "fork", "wy")


@dataclass(frozen=True)
class GdnMode:
    """How a verify runs the recurrent layers on a tree (every family; the name is the spec's
    ``gdn_mode``): "wy", the default, the family's one-pass exact form over the real tree.

    exact: the mode's tree outputs equal per-path forwards (naive's do not past a branch);
    batched: the GDN layer has a form over B padded trees (fork has none, and its layer runs
    per sequence, measured as such); forks: every node's state from its parent's by the plain
    step. The maths each mode picks lives with its family (``families/gdn/wy.py``: ``core``,
    ``core_batch``, ``state``)."""
    name: str = "wy"
    exact: ClassVar[bool] = True
    batched: ClassVar[bool] = True
    forks: ClassVar[bool] = False

    def parents(self, tree) -> torch.Tensor:
        """The parents [N+1] the recurrent layers use for ``tree``."""
        return tree.parents

    def needs_rescore(self, path: torch.Tensor) -> bool:
        return False


@dataclass(frozen=True)
class NaiveMode(GdnMode):
    """The flattened tree read as a chain: what a tree-unaware implementation does."""
    name: str = "naive"
    exact: ClassVar[bool] = False

    def parents(self, tree) -> torch.Tensor:
        return chain_parents(tree.num_nodes)

    def needs_rescore(self, path: torch.Tensor) -> bool:
        return not torch.equal(path, torch.arange(path.numel()))


@dataclass(frozen=True)
class ForkMode(GdnMode):
    """Per-node conv windows from ancestors and per-node states from the parent's; no batched
    form (``batched`` False)."""
    name: str = "fork"
    batched: ClassVar[bool] = False
    forks: ClassVar[bool] = True


MODES = {"naive": NaiveMode(), "fork": ForkMode(), "wy": GdnMode()}


def gdn_mode(mode) -> GdnMode:
    """The ``GdnMode`` named ``mode`` (one of ``MODE_NAMES``), or ``mode`` itself if it is one."""
    if isinstance(mode, GdnMode):
        return mode
    if mode not in MODES:
        raise ValueError(f"gdn_mode must be one of {MODE_NAMES}, got {mode!r}")
    return MODES[mode]


METHODS = ("ar", "dflash", "ddtree")
MAX_BUDGET = 1024


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class Sampling:
    """temperature (0: greedy), accept_rule (the walk at T > 0, a ``rules.Walk``: "rejection",
    DFlash's rule with the drafter's q, or "target", target-only matching, by name
    (``rules.ACCEPT_RULES``), or a walk of one's own, ``rules``) and seed (an int >= 0;
    sequence b of a batch samples with seed + b)."""
    temperature: float = 0.0
    accept_rule: Walk | str = "rejection"
    seed: int = 0

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {t!r}")
        object.__setattr__(self, "accept_rule", as_walk(self.accept_rule))
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def draws_tree(self) -> bool:
        """True when the round draws its tree's tokens from the drafter's q (T > 0 and a walk
        that needs it, ``Walk.draws_tree``: the rejection walk)."""
        return not self.greedy and self.accept_rule.draws_tree

    def as_dict(self) -> dict:
        """Plain names and numbers (the walk by its name)."""
        return {"temperature": self.temperature, "accept_rule": self.accept_rule.name, "seed": self.seed}


def _check_per_prompt(name: str, value, check) -> None:
    for v in (value if isinstance(value, tuple) else (value,)):
        check(v)


def _check_budget(b) -> None:
    if b != "auto" and (not _is_int(b) or not 1 <= b <= MAX_BUDGET):
        raise ValueError(f"budget must be an int in [1, {MAX_BUDGET}] or 'auto', got {b!r}")


def _check_new(n) -> None:
    if not _is_int(n) or n < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {n!r}")


@dataclass(frozen=True)
class GenerationSpec:
    """What one generation decodes.

    method: ``METHODS``; budget: draft nodes per DDTree round (an int in [1, MAX_BUDGET]) or
    "auto" (``allocate.auto_trees``; needs a cost model), or a tuple with one int per prompt of
    a batch; block_size: drafter block (>= 2; its upper bound is the drafter's, checked with the
    models); max_new_tokens: an int, or a tuple with one per prompt; sampling: ``Sampling``;
    tree: a ``rules.TreeRule``: "unary" / "conditional" by name (``rules.TREES``), any callable
    rule(draft, root_token, budget) -> DraftTree, or None (the drafter's own); method "dflash"
    drafts the rule's ``chain``; gdn_mode: a ``GdnMode`` (a name is resolved once, here);
    compile: run the loop's forwards compiled (``compiled``).
    """
    method: str = "ddtree"
    budget: int | str | tuple = 32
    block_size: int = 8
    max_new_tokens: int | tuple = 128
    sampling: Sampling = field(default_factory=Sampling)
    tree: TreeRule | str | None = None
    gdn_mode: GdnMode | str = "wy"
    compile: bool = False

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("budget", "max_new_tokens"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.method != "ar":
            _check_per_prompt("budget", self.budget, _check_budget)
            if isinstance(self.budget, tuple) and "auto" in self.budget:
                raise ValueError(f"budget must be an int, one int per prompt, or 'auto' (for the whole batch), "
                                 f"got {self.budget!r}")
            if not _is_int(self.block_size) or self.block_size < 2:
                raise ValueError(f"block_size must be an int >= 2, got {self.block_size!r}")
        _check_per_prompt("max_new_tokens", self.max_new_tokens, _check_new)
        if not isinstance(self.sampling, Sampling):
            raise ValueError(f"sampling must be a Sampling, got {type(self.sampling).__name__}")
        object.__setattr__(self, "tree", as_rule(self.tree))
        if self.method == "dflash" and self.tree is not None and self.tree.chain is None:
            raise ValueError(f"method 'dflash' drafts a chain, and the tree rule {self.tree.name!r} has none "
                             "(a ``chain`` attribute): run it with method='ddtree'")
        object.__setattr__(self, "gdn_mode", gdn_mode(self.gdn_mode))
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be True or False, got {self.compile!r}")

    @classmethod
    def build(cls, spec: "GenerationSpec | None" = None, **kwargs) -> "GenerationSpec":
        """``spec`` itself, or one built from keyword arguments: the spec's fields, plus
        temperature / accept_rule / seed for its ``Sampling``."""
        if spec is not None:
            if kwargs:
                raise ValueError(f"pass a spec or keyword arguments, not both (got spec and {sorted(kwargs)})")
            if not isinstance(spec, cls):
                raise ValueError(f"spec must be a GenerationSpec, got {type(spec).__name__}")
            return spec
        sampling = {k: kwargs.pop(k) for k in ("temperature", "accept_rule", "seed") if k in kwargs}
        if "sampling" in kwargs and sampling:
            raise ValueError("pass sampling or temperature / accept_rule / seed, not both")
        unknown = set(kwargs) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise TypeError(f"unknown generation argument(s) {sorted(unknown)}; allowed: "
                            f"{sorted(cls.__dataclass_fields__) + ['accept_rule', 'seed', 'temperature']}")
        return cls(**kwargs, **({"sampling": Sampling(**sampling)} if sampling else {}))

    def per_prompt(self, count: int) -> tuple[list, list]:
        """(budgets, max_new_tokens), one of each per prompt of a batch of ``count``."""
        return _per_prompt("budget", self.budget, count), _per_prompt("max_new_tokens", self.max_new_tokens, count)

    def with_(self, **changes) -> "GenerationSpec":
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)

    def as_dict(self) -> dict:
        """Plain names and numbers (the tree rule and the walk by their names; a stored row keys a
        plug-in by ``experiments.plumbing.meaning.plugin_key``)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(sampling=self.sampling.as_dict(), tree=None if self.tree is None else self.tree.name,
                 gdn_mode=self.gdn_mode.name)
        return d


def _per_prompt(name: str, value, count: int) -> list:
    if isinstance(value, tuple):
        if len(value) != count:
            raise ValueError(f"{name} must be one value or a list of {count} (one per prompt), got {len(value)} values")
        return list(value)
    return [value] * count


# --- what a generation returns, and the checks it needs against the models ---------------
PHASES = ("draft", "tree", "verify", "accept", "commit")


@dataclass
class Generation:
    """tokens: new tokens; acceptance_lengths: accepted draft tokens + 1 per round;
    tree_sizes: draft nodes verified per round; timings: seconds per phase and total;
    entropies: per new token, the entropy (nats) of the target distribution it was chosen
    from, softmax(logits / T) (at T = 0: softmax(logits), the target's own uncertainty)."""
    tokens: list[int] = field(default_factory=list)
    acceptance_lengths: list[int] = field(default_factory=list)
    tree_sizes: list[int] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES + ("prefill", "total"), 0.0))

    @property
    def tau(self) -> float:
        """Mean acceptance length (accepted draft tokens + 1 per target forward)."""
        return sum(self.acceptance_lengths) / max(1, len(self.acceptance_lengths))

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / max(self.timings["total"], 1e-12)


def entropies(logits: torch.Tensor, temperature: float) -> list[float]:
    """Entropy in nats of softmax(logits / T) per row of logits [n, V] (T = 0 reads as 1), in
    the logits' precision, at least float32 (finite logits: a -inf logit would give 0 * -inf)."""
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))
    log_p = torch.log_softmax(x / temperature if temperature else x, -1)
    return (log_p.exp() * log_p).sum(-1).neg_().tolist()


def tree_rule(drafter, tree) -> TreeRule:
    """The ``rules.TreeRule`` a generation with ``drafter`` builds its trees by: ``tree`` (a rule,
    a built-in's name or any callable, ``rules.as_rule``), or for None the drafter's own
    (``rules.drafters_own``: "conditional" for a DFlash 2 drafter, else "unary"); ValueError
    when the drafter cannot run it (``TreeRule.check_drafter``)."""
    rule = as_rule(tree)
    rule = drafters_own(drafter) if rule is None else rule
    rule.check_drafter(drafter)
    return rule


def round_rule(rule: TreeRule, method: str) -> TreeRule:
    """The rule a round of ``method`` calls: DDTree the rule itself, DFlash its linear draft (``chain``)."""
    return rule.chain if method == "dflash" else rule


def check_generate_args(target, drafter, prompt_ids, spec: GenerationSpec, budget, max_new_tokens,
                        *, cost_model=None) -> torch.Tensor:
    """What a valid ``spec`` still needs checked against the models, for one prompt (its
    ``budget`` and ``max_new_tokens``), before any work; -> the prompt as LongTensor[T]."""
    if spec.method != "ar" and drafter is not None:
        tree_rule(drafter, spec.tree)
    prompt = token_ids(prompt_ids, target.config.vocab_size, "prompt_ids")
    if prompt.numel() == 0:
        raise ValueError("prompt_ids must hold at least 1 token, got an empty prompt")
    if spec.method != "ar":
        _check_spec_args(target, drafter, budget, spec.block_size, cost_model)
    _check_length(target, drafter, prompt.numel(), max_new_tokens, 0 if spec.method == "ar" else spec.block_size)
    return prompt


def _check_spec_args(target, drafter, budget, block_size, cost_model) -> None:
    """The drafter, budget and block size of a speculative method."""
    if budget == "auto" and cost_model is None:
        raise ValueError("budget='auto' needs cost_model (ddtree_lab.experiments.plumbing.costs.cost_model)")
    if drafter is None:
        raise ValueError("a speculative method needs a drafter, got None")
    if drafter.cfg.vocab_size != target.config.vocab_size:
        raise ValueError(f"drafter vocab ({drafter.cfg.vocab_size}) must equal the target's "
                         f"({target.config.vocab_size})")
    if not 2 <= block_size <= drafter.cfg.block_size:
        raise ValueError(f"block_size must be an int in [2, {drafter.cfg.block_size}] "
                         f"(the drafter was trained at {drafter.cfg.block_size}), got {block_size!r}")


def _check_length(target, drafter, prompt_len: int, max_new_tokens, block_size: int) -> None:
    """prompt + max_new_tokens (+ one draft block) must fit the models' positions."""
    limit = target.config.max_position_embeddings
    if drafter is not None and block_size:
        limit = min(limit, drafter.cfg.max_positions)
    most = limit - prompt_len - block_size
    if most < 1:
        raise ValueError(f"prompt_ids ({prompt_len} tokens) leave no room for new tokens in the model's "
                         f"{limit} positions" + (f" (with a block of {block_size})" if block_size else ""))
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= most:
        raise ValueError(f"max_new_tokens must be an int in [1, {most}] (the model's {limit} positions minus "
                         f"the prompt's {prompt_len}" + (f" and one block of {block_size}" if block_size else "")
                         + f"), got {max_new_tokens!r}")


def token_ids(ids, vocab_size: int, name: str = "ids") -> torch.Tensor:
    """``ids`` (a list, array or tensor of integers) as LongTensor[T]; refuses floats and bools
    (a float prompt is not token ids) and ids outside [0, vocab_size)."""
    t = torch.as_tensor(ids)
    if t.numel() and (t.dtype == torch.bool or t.is_floating_point() or t.is_complex()):
        raise ValueError(f"{name} must be integer token ids, got dtype {t.dtype}")
    t = t.to(torch.long).reshape(-1)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab_size):
        raise ValueError(f"{name} must hold token ids in [0, {vocab_size}), got min {int(t.min())} max {int(t.max())}")
    return t
