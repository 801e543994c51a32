"""Is a generation lossless? One check for any tree rule and acceptance walk (issue 59).

Speculative decoding is lossless when its output is distributed as AR sampling from the
target (DFlash, arXiv 2602.06036, section 3; speculative sampling, arXiv 2211.17192):

- T = 0: the tokens equal AR's, token for token, on every prompt;
- T > 0: the first ``positions`` new tokens follow the target. ``samples`` seeded runs (seeds
  spec.seed, spec.seed + 1, ...; the prompts take turns) give, per position k, each run's token
  x_k and the target's exact distribution p(. | prompt, x_1 .. x_k-1) = softmax(logits / T)
  from a plain target forward over the run's own prefix (what AR samples from). Per position,
  Pearson's chi-square compares the observed counts O_v with the expected E_v = sum over runs
  of p(v | the run's prefix), cells of E < 5 binned (``chi_square``). Under H0 each x_k is a
  draw from its own p, so the statistic is at most chi-square distributed (runs with different
  p make it conservative). The check passes when the smallest p-value times the number of
  positions (Bonferroni) is at least ``alpha``. The chi-square tail is an approximation that
  flatters a deviation when few runs fill the cells: keep ``samples`` near its default.

``biased_walk(epsilon)`` is the deliberately wrong walk the lab measures the check's power
with: target matching, but where the target's sample matches no child it accepts the first
child anyway with probability epsilon (``biased_walk(1.0)``: always).

    report = check_lossless(target, drafter, prompts, spec)     # prompts: lists of token ids
    report.passed, report.p_values, report.counts, print(report.text())
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from .decode import generate, generate_batch
from .rules import Walk
from .rules import choose_tokens, probs
from .spec import GenerationSpec

SAMPLES = 480       # runs at T > 0, split over the prompts (the shipped pairs, one core: well within a minute)
POSITIONS = 3       # new tokens tested per run (a bias compounds with depth: the third is the most telling)
ALPHA = 1e-3        # the family-wise false-alarm rate
MIN_EXPECTED = 5.0  # cells expecting fewer are binned
STATISTIC = "Pearson chi-square per position, cells expecting < 5 binned, Bonferroni over positions"  # what a p means


@dataclass(frozen=True)
class LosslessReport:
    """What ``check_lossless`` found. temperature; passed; p_values {position k (1-based): p}
    (T > 0; empty at T = 0); counts: T > 0 {k: (observed [V], expected [V])}, T = 0 {prompt
    index: (new tokens equal to AR's before the first difference, new tokens)}; samples (runs);
    seconds; alpha."""
    temperature: float
    passed: bool
    p_values: dict
    counts: dict
    samples: int
    seconds: float
    alpha: float = ALPHA

    @property
    def p_value(self) -> float:
        """The family's p-value: the smallest per-position p times the positions (Bonferroni; T = 0: 1 or 0)."""
        if not self.p_values:
            return 1.0 if self.passed else 0.0
        return min(1.0, len(self.p_values) * min(self.p_values.values()))

    def text(self) -> str:
        """One line: verdict, what was compared, the p-values."""
        verdict = "lossless" if self.passed else "NOT lossless"
        if not self.p_values:
            same = sum(a == n for a, n in self.counts.values())
            return f"{verdict} at T = 0: {same} of {len(self.counts)} prompts equal AR token for token"
        ps = ", ".join(f"{k}: {p:.3g}" for k, p in self.p_values.items())
        return (f"{verdict} at T = {self.temperature:g}: {self.samples} runs, chi-square per position (p {ps}); "
                f"family p = {self.p_value:.3g} vs alpha {self.alpha:g}; {self.seconds:.0f} s")


@torch.inference_mode()
def check_lossless(target, drafter, prompts, spec: GenerationSpec | None = None, *, samples: int = SAMPLES,
                   positions: int = POSITIONS, alpha: float = ALPHA, batch: int = 32, **spec_args) -> LosslessReport:
    """Check ``spec`` (a ``GenerationSpec``, or its fields as keyword arguments: any tree rule
    and walk) against AR on ``prompts`` (a list of token-id lists): at T = 0 token for token,
    at T > 0 by chi-square over ``samples`` runs of the first ``positions`` tokens (module
    docstring). batch: runs decoded at once (``generate_batch``). -> ``LosslessReport``."""
    spec = GenerationSpec.build(spec, **spec_args)
    prompts = _check_args(prompts, spec, samples, positions)
    t0 = time.perf_counter()
    if spec.sampling.greedy:
        counts = {i: _greedy_match(target, drafter, p, spec) for i, p in enumerate(prompts)}
        passed = all(a == n for a, n in counts.values())
        return LosslessReport(0.0, passed, {}, counts, len(prompts), time.perf_counter() - t0, alpha)
    runs = _sampled_runs(target, drafter, prompts, spec, samples, positions, batch)  # per prompt, tokens [positions] a run
    counts = _counts(target, prompts, runs, spec.sampling.temperature, positions, batch)
    p_values = {k: chi_square(o, e)[2] for k, (o, e) in counts.items()}
    passed = min(1.0, positions * min(p_values.values())) >= alpha
    return LosslessReport(spec.sampling.temperature, passed, p_values, counts, samples, time.perf_counter() - t0, alpha)


def _check_args(prompts, spec: GenerationSpec, samples, positions) -> list[list[int]]:
    if not isinstance(prompts, (list, tuple)) or not prompts or any(isinstance(p, int) for p in prompts):
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {prompts!r:.80}")
    for name, value in (("samples", samples), ("positions", positions)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if isinstance(spec.budget, tuple) or spec.budget == "auto":
        raise ValueError(f"check_lossless needs one fixed budget (an int), got {spec.budget!r}")
    return [torch.as_tensor(p, dtype=torch.long).reshape(-1).tolist() for p in prompts]


def _greedy_match(target, drafter, prompt: list[int], spec: GenerationSpec) -> tuple[int, int]:
    """(new tokens equal to AR's before the first difference, new tokens) of one prompt."""
    spec_tokens = generate(target, drafter, prompt, spec).tokens  # max_new_tokens of them, as AR's
    ar_tokens = generate(target, None, prompt, spec.with_(method="ar")).tokens
    return next((i for i, (a, b) in enumerate(zip(spec_tokens, ar_tokens)) if a != b), len(ar_tokens)), len(ar_tokens)


def _sampled_runs(target, drafter, prompts, spec: GenerationSpec, samples: int, positions: int,
                  batch: int) -> list[list[list[int]]]:
    """Per prompt, its runs' first ``positions`` new tokens: run i is seeded spec.seed + i and
    decodes prompt i mod len(prompts); ``batch`` copies of a prompt decoded at once."""
    runs, seed = [], spec.sampling.seed
    for i, prompt in enumerate(prompts):
        n, mine = len(range(i, samples, len(prompts))), []
        for start in range(0, n, batch):
            size = min(batch, n - start)
            chunk = spec.with_(max_new_tokens=positions, sampling=replace(spec.sampling, seed=seed))
            mine += [g.tokens for g in generate_batch(target, drafter, [prompt] * size, chunk)]
            seed += size
        runs.append(mine)
    return runs


def _counts(target, prompts: list[list[int]], runs: list[list[list[int]]], temperature: float, positions: int,
            batch: int) -> dict:
    """{k: (observed [V], expected [V])} over the runs: expected from a plain target forward over
    each distinct prefix (the prompt and the run's first positions - 1 tokens)."""
    V = target.config.vocab_size
    observed, expected = torch.zeros(positions, V, dtype=torch.float64), torch.zeros(positions, V, dtype=torch.float64)
    rows = torch.arange(positions)
    for prompt, mine in zip(prompts, runs):
        by_prefix = {}
        for tokens in mine:
            by_prefix.setdefault(tuple(tokens[:-1]), []).append(tokens)
        prefixes = list(by_prefix)
        for start in range(0, len(prefixes), batch):
            group = prefixes[start:start + batch]
            for prefix, p in zip(group, _next_token_probs(target, [prompt + list(x) for x in group], positions,
                                                          temperature)):  # p [positions, V]
                for tokens in by_prefix[prefix]:
                    expected += p
                    observed[rows, torch.tensor(tokens)] += 1
    return {k + 1: (observed[k], expected[k]) for k in range(positions)}


def _next_token_probs(target, sequences: list[list[int]], positions: int, temperature: float) -> torch.Tensor:
    """[n, positions, V] float64: softmax(logits / T) of the target's next token after each of
    the last ``positions`` prefixes of every sequence (one length): a plain target forward,
    what AR samples from."""
    ids = torch.tensor(sequences, device=next(target.parameters()).device)  # [n, P + positions - 1]
    return probs(target(ids, logits_to_keep=positions).logits, temperature)  # [n, positions, V]


def chi_square(observed: torch.Tensor, expected: torch.Tensor, min_expected: float = MIN_EXPECTED) -> tuple:
    """Pearson's chi-square of counts ``observed`` [V] against ``expected`` [V] (same total).
    Cells expecting fewer than ``min_expected`` are binned, smallest first, into groups that
    each expect at least that many (a last short group joins the group before it, or the
    smallest large cell). -> (statistic, degrees of freedom, p-value: the chi-square upper
    tail, ``torch.special.gammaincc``)."""
    o, e = _binned(observed.double(), expected.double(), min_expected)
    stat, df = float(((o - e) ** 2 / e).sum()), len(e) - 1
    if df < 1:
        return stat, df, 1.0
    p = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    return stat, df, float(p)


def _binned(observed: torch.Tensor, expected: torch.Tensor, min_expected: float) -> tuple:
    """(observed, expected) per bin: every cell expecting ``min_expected`` or more alone, the
    others grouped smallest first (``chi_square``); cells expecting nothing dropped."""
    order = expected.argsort()  # ascending
    e, o = expected[order].tolist(), observed[order].tolist()
    big = [(oi, ei) for oi, ei in zip(o, e) if ei >= min_expected]
    bins, acc = [], [0.0, 0.0]
    for oi, ei in zip(o, e):
        if 0 < ei < min_expected:
            acc = [acc[0] + oi, acc[1] + ei]
            if acc[1] >= min_expected:
                bins, acc = bins + [acc], [0.0, 0.0]
    if acc[1] > 0:  # a short last group: into the group before it, else the smallest large cell
        if bins:
            bins[-1] = [bins[-1][0] + acc[0], bins[-1][1] + acc[1]]
        elif big:
            big[0] = (big[0][0] + acc[0], big[0][1] + acc[1])
        else:
            bins = [acc]
    cells = [tuple(b) for b in bins] + big
    return torch.tensor([c[0] for c in cells]), torch.tensor([c[1] for c in cells])


@dataclass(frozen=True, eq=False)
class BiasedWalk(Walk):
    """A deliberately wrong walk (the check's power, module docstring): target matching, but
    at a node whose target sample matches no child, the first child is accepted anyway with
    probability ``epsilon``; ``fired`` counts those overrides."""
    epsilon: float
    fired: list = field(default_factory=lambda: [0])
    name = "biased"

    def __call__(self, tree, target_logits, proposal, temperature, generator):
        choice, path = choose_tokens(target_logits, temperature, generator).tolist(), [0]
        while tree.children[path[-1]]:
            u = path[-1]
            nxt = tree.child_by_token[u].get(choice[u])
            if nxt is None and float(torch.rand((), generator=generator, dtype=torch.float64)) < self.epsilon:
                nxt = tree.children[u][0]
                self.fired[0] += 1
            if nxt is None:
                break
            path.append(nxt)
        return path, int(choice[path[-1]])


def biased_walk(epsilon: float = 1.0) -> BiasedWalk:
    """``BiasedWalk`` overriding a mismatch with probability ``epsilon``."""
    return BiasedWalk(float(epsilon))
