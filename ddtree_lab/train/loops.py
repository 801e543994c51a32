"""Repetition loops and copying: tag every round by both, and split every metric by them.

A small target decoded greedily falls into loops, and a loop is trivially predictable, so
a measurement that mixes loops and text measures loops (docs/background.md section 8). Two
tags per round, read at the round's start:

- *looping*: the output so far (the tokens committed before the round; the prompt is given
  text, and a docstring's list of examples is no loop the model fell into) ends in a loop,
  in either of two ways:
  - a periodic tail: for some period p <= ``MAX_PERIOD`` its last max(``REPEATS`` * p,
    ``MIN_WINDOW``) tokens repeat with period p, at most a ``DRIFT`` share of the comparisons
    breaking it (the window scales with the period: a 2-token loop counts after 6 tokens, a
    20-token one after 60);
  - a drifting loop: of its last ``LOCAL_WINDOW`` tokens, at least ``LOCAL_SHARE`` end an
    ``NGRAM``-gram already seen in the ``LOOKBACK`` tokens before them (a loop whose unit
    changes as it goes: ``x=None, y=None, xy=None``, one repeated line giving way to a
    near-copy);
- *copyable*: the round's accepted block, preceded by the last ``LEAD`` committed tokens,
  occurs earlier in the context (prompt + output so far): an n-gram lookup on the context
  (prompt-lookup decoding) could have proposed it (issue 60's definition).

``round_tags`` computes both for every round of a generation in one pass over its tokens;
``is_looping`` and ``is_copyable`` are the plain per-round twins it is tested against. The
lens is measured against rounds labelled by reading them (data/loop_labels.json,
``experiments/tests/test_loop_labels.py``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

MAX_PERIOD = 32     # longest loop unit, tokens (about a line of code)
REPEATS = 3         # copies of the unit a periodic tail must show
MIN_WINDOW = 6      # shortest periodic tail, tokens (periods 1 and 2: six tokens)
DRIFT = 0.25        # share of a periodic tail's comparisons that may break the period
NGRAM, LOOKBACK, LOCAL_WINDOW, LOCAL_SHARE = 3, 64, 32, 0.6   # the drifting-loop test
LEAD = 3            # committed tokens before a block that a copy must match too


def _check_loop_args(max_period: int, repeats: int, min_window: int, drift: float) -> None:
    for name, value, low in (("max_period", max_period, 1), ("repeats", repeats, 2), ("min_window", min_window, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not 0 <= drift < 0.5:
        raise ValueError(f"drift must be a share in [0, 0.5), got {drift!r}")


def periodic_window(period: int, repeats: int = REPEATS, min_window: int = MIN_WINDOW) -> int:
    """Tokens a tail of period ``period`` must span to count as a loop."""
    return max(repeats * period, min_window)


def loop_period(tokens: Sequence[int], max_period: int = MAX_PERIOD, repeats: int = REPEATS,
                min_window: int = MIN_WINDOW, drift: float = DRIFT) -> int:
    """The smallest period p <= max_period whose window (``periodic_window``) of the last
    tokens repeats with period p up to a ``drift`` share of broken comparisons; 0 if none."""
    _check_loop_args(max_period, repeats, min_window, drift)
    tokens = list(tokens)
    for p in range(1, max_period + 1):
        w = periodic_window(p, repeats, min_window)
        if len(tokens) < w:
            continue
        tail = tokens[-w:]
        broken = sum(tail[i] != tail[i - p] for i in range(p, w))
        if broken <= drift * (w - p):
            return p
    return 0


def local_repeat_share(tokens: Sequence[int], ngram: int = NGRAM, lookback: int = LOOKBACK,
                       window: int = LOCAL_WINDOW) -> float:
    """Of the last ``window`` tokens, the share ending an ``ngram``-gram that also ends within
    the ``lookback`` tokens before it (0.0 with fewer than window + ngram - 1 tokens)."""
    tokens = list(tokens)
    n = len(tokens)
    if n < window + ngram - 1:
        return 0.0
    seen = 0
    for i in range(n - window, n):
        gram = tokens[i - ngram + 1:i + 1]
        seen += any(tokens[j - ngram + 1:j + 1] == gram for j in range(max(ngram - 1, i - lookback), i))
    return seen / window


def is_looping(tokens: Sequence[int]) -> bool:
    """True when ``tokens`` (an output) end in a loop: a periodic tail (``loop_period``) or a
    drifting loop (``local_repeat_share`` >= ``LOCAL_SHARE``)."""
    return loop_period(tokens) > 0 or local_repeat_share(tokens) >= LOCAL_SHARE


def is_copyable(context: Sequence[int], block: Sequence[int], lead: int = LEAD) -> bool:
    """True when the last ``lead`` tokens of ``context`` followed by ``block`` occur inside
    ``context`` (an empty block copies nothing: False)."""
    context, block = list(context), list(block)
    if not block:
        return False
    pattern = context[max(0, len(context) - lead):] + block
    m = len(pattern)
    return any(context[i:i + m] == pattern for i in range(len(context) - m + 1))


def round_blocks(tokens: Sequence[int], acceptance_lengths: Sequence[int], committed: int = 0) -> list[tuple]:
    """(start, end) of every round's accepted block in ``tokens``: round r starts after
    ``committed`` + sum(acceptance_lengths[:r]) tokens (a last block is cut at the output's end)."""
    out, done = [], committed
    for a in acceptance_lengths:
        out.append((min(done, len(tokens)), min(done + a, len(tokens))))
        done += a
    return out


def _periodic_flags(seq: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``loop_period(seq[:c]) > 0`` for every c of ``starts``, by one cumulative count of broken
    comparisons per period."""
    out = np.zeros(len(starts), dtype=bool)
    for p in range(1, MAX_PERIOD + 1):
        if len(seq) <= p:
            break
        broken = np.concatenate([[0], np.cumsum(seq[p:] != seq[:-p])])  # broken[k]: comparisons i < p + k
        w = periodic_window(p)
        count = broken[np.clip(starts - p, 0, None)] - broken[np.clip(starts - w, 0, None)]  # i in [c - w + p, c)
        out |= (starts >= w) & (count <= DRIFT * (w - p))
    return out


def _local_flags(seq: Sequence[int], starts: np.ndarray) -> np.ndarray:
    """``local_repeat_share(seq[:c]) >= LOCAL_SHARE`` for every c of ``starts``: whether each
    position ends an n-gram seen within the lookback, once for the sequence."""
    last, seen = {}, np.zeros(len(seq) + 1, dtype=np.int64)
    for i in range(NGRAM - 1, len(seq)):
        gram = tuple(seq[i - NGRAM + 1:i + 1])
        seen[i + 1] = gram in last and i - last[gram] <= LOOKBACK
        last[gram] = i
    cum = np.cumsum(seen)  # cum[k]: positions i < k that repeat
    enough = starts >= LOCAL_WINDOW + NGRAM - 1
    return enough & (cum[starts] - cum[np.clip(starts - LOCAL_WINDOW, 0, None)] >= LOCAL_SHARE * LOCAL_WINDOW)


def _copy_flags(seq: Sequence[int], blocks: list[tuple]) -> list[bool]:
    """``is_copyable(seq[:s], seq[s:e])`` for every (s, e) of ``blocks``, through an index of
    where each token occurs."""
    where = defaultdict(list)
    for i, t in enumerate(seq):
        where[t].append(i)
    out = []
    for s, e in blocks:
        pattern = list(seq[max(0, s - LEAD):e])
        m = len(pattern)
        out.append(e > s and any(i + m <= s and list(seq[i:i + m]) == pattern for i in where[pattern[0]]))
    return out


def round_tags(prompt_ids: Sequence[int], tokens: Sequence[int], acceptance_lengths: Sequence[int],
               committed: int = 0) -> dict:
    """Both tags of every round of one generation: ``tokens`` (the new tokens: ``committed``
    of them before the first round, e.g. the reference loop's prefill token, then rounds of
    ``acceptance_lengths``) after ``prompt_ids`` -> {"round_looping": [bool] per round
    (``is_looping`` of the output before the round), "round_copyable": [bool] per round
    (``is_copyable`` of the context before the round and the round's block)}."""
    prompt, tokens = list(prompt_ids), list(tokens)
    blocks = round_blocks(tokens, acceptance_lengths, committed)
    starts = np.array([s for s, _ in blocks], dtype=np.int64)
    out = np.asarray(tokens, dtype=np.int64)
    looping = _periodic_flags(out, starts) | _local_flags(tokens, starts)
    shift = len(prompt)
    copyable = _copy_flags(prompt + tokens, [(s + shift, e + shift) for s, e in blocks])
    return {"round_looping": [bool(f) for f in looping], "round_copyable": [bool(c) for c in copyable]}


def round_tags_reference(prompt_ids, tokens, acceptance_lengths, committed: int = 0) -> dict:
    """``round_tags`` by the plain twins, one round at a time (the test oracle)."""
    prompt, tokens = list(prompt_ids), list(tokens)
    blocks = round_blocks(tokens, acceptance_lengths, committed)
    return {"round_looping": [is_looping(tokens[:s]) for s, _ in blocks],
            "round_copyable": [is_copyable(prompt + tokens[:s], tokens[s:e]) for s, e in blocks]}


def generation_tags(prompt_ids: Sequence[int], tokens: Sequence[int], acceptance_lengths: Sequence[int],
                    committed: int = 0) -> dict:
    """The loop metrics every stored row carries: ``round_tags`` + "ends_in_loop" (whether the
    whole output ends in a loop, ``is_looping``)."""
    return round_tags(prompt_ids, tokens, acceptance_lengths, committed) | {"ends_in_loop": is_looping(tokens)}


def round_loop_flags(prompt_ids: Sequence[int], tokens: Sequence[int], acceptance_lengths: Sequence[int],
                     committed: int = 0) -> list[bool]:
    """One flag per round: was the output looping when the round started (``round_tags``'
    "round_looping")."""
    return round_tags(prompt_ids, tokens, acceptance_lengths, committed)["round_looping"]


def loop_split(acceptance_lengths: Sequence[int], looping: Sequence[bool], copyable: Sequence[bool] | None = None) -> dict:
    """tau over all rounds and by tag, and each tag's share of rounds.

    -> {"tau", "tau_outside_loops" (the rounds not looping), "loop_round_share", "rounds",
        "rounds_outside_loops"; with ``copyable``: "copyable_share", "tau_copyable",
        "tau_not_copyable", "tau_clean" (the rounds neither looping nor copyable),
        "rounds_clean"} (a tau over no round is nan)."""
    n = len(acceptance_lengths)
    for name, flags in (("looping", looping), ("copyable", copyable)):
        if flags is not None and len(flags) != n:
            raise ValueError(f"{name} flags must have one entry per round ({n}), got {len(flags)}")
    outside = [a for a, f in zip(acceptance_lengths, looping) if not f]
    out = {"tau": _mean(acceptance_lengths), "tau_outside_loops": _mean(outside),
           "loop_round_share": (n - len(outside)) / n if n else float("nan"),
           "rounds": n, "rounds_outside_loops": len(outside)}
    if copyable is None:
        return out
    copied = [a for a, c in zip(acceptance_lengths, copyable) if c]
    clean = [a for a, f, c in zip(acceptance_lengths, looping, copyable) if not f and not c]
    return out | {"copyable_share": len(copied) / n if n else float("nan"), "tau_copyable": _mean(copied),
                  "tau_not_copyable": _mean([a for a, c in zip(acceptance_lengths, copyable) if not c]),
                  "tau_clean": _mean(clean), "rounds_clean": len(clean)}


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if len(xs) else float("nan")


def distinct_ngram_share(tokens: Sequence[int], n: int = 4) -> float:
    """Distinct n-grams / all n-grams of ``tokens`` (1.0: no repetition; nan if too short)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else float("nan")
