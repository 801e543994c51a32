"""The copy baseline: prompt-lookup decoding, transformers' own (``generate(...,
prompt_lookup_num_tokens=N)``), as a method of the results stores (``method: "lookup"``).

Each round drafts the ``N`` tokens that followed the first earlier occurrence of the context's
last n-gram (n <= ``NGRAM``, longest first; none found: no draft) and the target verifies them
in one forward, greedily: lossless at T = 0. No drafter and no training: its tau is what
copying the context gives for free (issue 60; docs/background.md section 8), the baseline the
drafters' tau is read against.

Rounds: every target forward is one, the first (the prompt's prefill) included, since it
verifies the first draft too; tau is tokens per target forward. A forward pre-hook on the
target reads the cache length at every call: the loop crops its cache to the committed length
less one before each verify, so consecutive lengths give each round's tokens
(``rounds_from_calls``).

Stateful targets: transformers refuses assisted generation on a model with a recurrent state
("not supported with stateful models": Qwen3.5's Gated DeltaNet layers, whose cache cannot roll
back). There a row comes from ``lookup_reference``, the same proposer (transformers'
``PromptLookupCandidateGenerator``) and the same acceptance, each round verified by a forward of
the whole sequence (no cache, nothing to roll back): the same rounds and tokens, so the same
tau, but no timing a reader could compare, so the row stores no seconds (its tokens/s is NaN).
On an attention target the two loops agree round for round (``tests/test_lookup.py``).
"""
from __future__ import annotations

import math
import time

import torch
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from ddtree_lab.core.verify import loop_ready
from ...core.decode import PHASES
from ...train.loops import generation_tags

NGRAM = 2   # the longest n-gram matched (transformers' default)


@torch.no_grad()
def lookup_generate(target, prompt_ids, max_new_tokens: int, num_tokens: int, ngram: int = NGRAM) -> dict:
    """transformers' prompt-lookup decoding as shipped, greedy, no early stop at an end token:
    -> {"tokens", "acceptance_lengths" (one per target forward), "tree_sizes" (draft tokens per
    round)}. Raises transformers' ``ValueError`` on a stateful target (``lookup_reference``)."""
    ids = torch.as_tensor(list(prompt_ids), dtype=torch.long).reshape(1, -1).to(target.device)
    calls: list[tuple[int, int]] = []  # (cache length, input length) at every target forward
    hook = target.register_forward_pre_hook(lambda module, args, kwargs: calls.append(
        (kwargs["past_key_values"].get_seq_length(), kwargs["input_ids"].shape[1])), with_kwargs=True)
    try:
        with loop_ready(target):
            out = target.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, prompt_lookup_num_tokens=num_tokens,
                                  max_matching_ngram_size=ngram, eos_token_id=None, pad_token_id=0)
    finally:
        hook.remove()
    tokens = out[0, ids.shape[1]:].tolist()
    return {"tokens": tokens, **rounds_from_calls(ids.shape[1], calls, len(tokens))}


def rounds_from_calls(prompt_len: int, calls: list[tuple[int, int]], n_tokens: int) -> dict:
    """Round lengths and draft sizes from the target's forward calls (cache length, input
    length): before call i > 0 the loop has committed cache + 1 tokens (the last one is the
    call's first input); call 0 is the prefill of the prompt and the first draft."""
    committed = [prompt_len] + [cache + 1 for cache, _ in calls[1:]] + [prompt_len + n_tokens]
    drafted = [calls[0][1] - prompt_len] + [n - 1 for _, n in calls[1:]]
    return {"acceptance_lengths": [b - a for a, b in zip(committed, committed[1:])], "tree_sizes": drafted}


@torch.no_grad()
def lookup_reference(target, prompt_ids, max_new_tokens: int, num_tokens: int, ngram: int = NGRAM) -> dict:
    """``lookup_generate``'s loop in plain steps, without a cache: transformers' own proposer,
    then one forward of the whole sequence and its draft; the draft's prefix that equals the
    target's argmax is accepted, with the target's next token (cut at ``max_new_tokens``)."""
    seq = torch.as_tensor(list(prompt_ids), dtype=torch.long).reshape(1, -1).to(target.device)
    end = seq.shape[1] + max_new_tokens
    proposer = PromptLookupCandidateGenerator(num_output_tokens=num_tokens, max_matching_ngram_size=ngram,
                                              max_length=end)
    acc, sizes = [], []
    with loop_ready(target):
        while seq.shape[1] < end:
            candidates, _ = proposer.get_candidates(seq)  # [1, L + k]: the sequence and its draft
            k = candidates.shape[1] - seq.shape[1]
            choice = target(candidates).logits[0, -k - 1:].argmax(-1)  # [k + 1] the target's token after each
            matched = int((candidates[0, seq.shape[1]:] == choice[:k]).int().cumprod(0).sum())
            new = choice[:matched + 1][:end - seq.shape[1]]
            seq = torch.cat([seq, new[None]], dim=1)
            acc.append(len(new))
            sizes.append(k)
    return {"tokens": seq[0, end - max_new_tokens:].tolist(), "acceptance_lengths": acc, "tree_sizes": sizes}


def lookup_metrics(pair, prompt_ids: list[int], num_tokens: int, max_new_tokens: int) -> dict:
    """One results-store row of prompt-lookup decoding with ``pair``'s target: tokens, rounds,
    tau (tokens per target forward), the loop tags (``loops.generation_tags``) and "loop":
    "transformers" (timed: wall seconds, no phase split) or, on a stateful target,
    "reference" (``lookup_reference``: not timed, seconds NaN)."""
    t0 = time.perf_counter()
    try:
        out, loop = lookup_generate(pair.target, prompt_ids, max_new_tokens, num_tokens), "transformers"
    except ValueError as err:
        if "stateful" not in str(err):
            raise
        out, loop = lookup_reference(pair.target, prompt_ids, max_new_tokens, num_tokens), "reference"
    total = time.perf_counter() - t0 if loop == "transformers" else math.nan
    tokens, acc = out["tokens"], out["acceptance_lengths"]
    return {"tokens": tokens, "acceptance_lengths": acc, "tree_sizes": out["tree_sizes"],
            "timings": dict.fromkeys(PHASES + ("prefill",), 0.0) | {"total": total},
            "tau": len(tokens) / max(1, len(acc)), "tokens_per_s": len(tokens) / total if total == total else math.nan,
            "rounds": len(acc), "prompt_len": len(prompt_ids), "entropy": math.nan, "loop": loop,
            **generation_tags(prompt_ids, tokens, acc)}


def run_lookup(cfg: dict, prompt_id: int, pair) -> dict:
    """A grid's runner for method "lookup" (``official.run_with_official`` hands it these rows):
    the draft length is the config's budget (the chain's own: block size - 1), at T = 0."""
    if cfg["temperature"] != 0:
        raise ValueError(f"method 'lookup' runs greedy (T = 0), got temperature {cfg['temperature']}")
    return lookup_metrics(pair, pair.prompt_ids(prompt_id), cfg["budget"], cfg["max_new_tokens"])
