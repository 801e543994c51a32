"""train.unlikelihood: the candidate rules, the loss on marked tokens only, resuming, bad arguments."""
import csv

import numpy as np
import pytest
import torch

from ddtree_lab.core.models import build_target
from ddtree_lab.train import unlikelihood as ul
from ddtree_lab.train.unlikelihood import (CANDIDATES, UnlikelihoodConfig, finetune, lens_candidates, mark,
                                           ngram_candidates, unlikelihood_loss)

TINY = dict(mle_windows=2, mle_len=16, prefixes=2, prefix_len=8, new_tokens=12, warmup_steps=1, eval_every=10)


def test_ngram_rule_marks_tokens_completing_a_seen_4gram():
    prefix, cont = [1, 2, 3, 4], [1, 2, 3, 4, 9, 2, 3, 4]
    # cont[3] completes (1, 2, 3, 4), seen in the prefix; cont[7] completes (9, 2, 3, 4): new
    assert ngram_candidates(prefix, cont) == [False, False, False, True, False, False, False, False]
    assert ngram_candidates([], [5, 6, 7]) == [False] * 3


def test_lens_rule_marks_a_loop_not_text():
    loop = [7, 8] * 20
    marks = lens_candidates([1, 2, 3], loop)
    assert len(marks) == len(loop) and not any(marks[:5]) and all(marks[-10:])
    assert not any(lens_candidates([1, 2, 3], list(range(10, 50))))


def test_loss_counts_marked_tokens_only():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11, requires_grad=True)
    tokens = torch.randint(0, 11, (2, 5))
    marks = torch.zeros(2, 5, dtype=torch.bool)
    marks[0, 2] = marks[1, 4] = True
    loss = unlikelihood_loss(logits, tokens, marks)
    p = torch.softmax(logits, -1)
    want = -(torch.log1p(-p[0, 2, tokens[0, 2]]) + torch.log1p(-p[1, 4, tokens[1, 4]])) / 10
    torch.testing.assert_close(loss, want)
    loss.backward()
    touched = logits.grad.abs().sum(-1) > 0
    assert torch.equal(touched, marks)   # no gradient reaches an unmarked position
    assert unlikelihood_loss(logits, tokens, torch.zeros_like(marks)).item() == 0.0


def test_mark_applies_the_rule_to_continuations():
    seqs = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10, 11, 12]])
    got = mark(CANDIDATES["ngram"], seqs, prefix_len=4)
    assert got.tolist() == [[False, False, False, True], [False] * 4]


@pytest.mark.parametrize("kwargs, name", [(dict(alpha=-0.1), "alpha"), (dict(steps=0), "steps"),
                                          (dict(lr=0.0), "lr"), (dict(lr=-1e-4), "lr"),
                                          (dict(candidates="bigram"), "candidates"),
                                          (dict(new_tokens=0), "new_tokens")])
def test_bad_arguments_name_the_parameter_and_range(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        UnlikelihoodConfig(**kwargs)


def _corpus(vocab: int = 64) -> dict:
    rng = np.random.default_rng(0)
    return {"train": rng.integers(0, vocab, 4000).astype(np.uint16),
            "val": rng.integers(0, vocab, 400).astype(np.uint16)}


def _weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_finetune_resumes_to_the_same_weights(tmp_path, monkeypatch):
    cfg = UnlikelihoodConfig(steps=3, lr=1e-3, alpha=1.0, ckpt_every_s=0.0, **TINY)
    corpus = _corpus()
    whole = build_target("gdn-toy", seed=0)
    finetune(whole, corpus, cfg, tmp_path / "whole")

    calls = {"n": 0}
    real_mark = ul.mark

    def mark_then_stop(*args):
        calls["n"] += 1
        if calls["n"] == 2:   # killed during step 2: step 1 is saved
            raise KeyboardInterrupt
        return real_mark(*args)

    run = tmp_path / "resumed"
    monkeypatch.setattr(ul, "mark", mark_then_stop)
    with pytest.raises(KeyboardInterrupt):
        finetune(build_target("gdn-toy", seed=0), corpus, cfg, run)
    monkeypatch.setattr(ul, "mark", real_mark)
    assert torch.load(run / "train_state.pt", weights_only=False)["state"]["step"] == 1
    resumed = build_target("gdn-toy", seed=0)
    assert finetune(resumed, corpus, cfg, run)["step"] == 3
    torch.testing.assert_close(_weights(resumed), _weights(whole))
    with (run / "steps.csv").open() as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [1, 2, 3]
    with pytest.raises(ValueError, match="holds the run of"):
        finetune(build_target("gdn-toy", seed=0), corpus, UnlikelihoodConfig(**{**vars(cfg), "alpha": 0.5}), run)
