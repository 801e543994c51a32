import math
import random

import pytest

from ddtree_lab.train.loops import (LEAD, MIN_WINDOW, REPEATS, distinct_ngram_share, is_copyable,
                                                   is_looping, local_repeat_share, loop_period, loop_split,
                                                   round_loop_flags, round_tags, round_tags_reference)


def periodic(period: int, length: int, offset: int = 0) -> list[int]:
    return [offset + i % period for i in range(length)]


@pytest.mark.parametrize("period", [1, 2, 7, 24, 32])
def test_three_copies_make_a_loop_with_its_smallest_period(period):
    tokens = list(range(1000, 1040)) + periodic(period, max(REPEATS * period, MIN_WINDOW))
    assert is_looping(tokens) and loop_period(tokens) == period


def test_the_window_scales_with_the_period():
    """Two copies of a 7-token unit are not a loop yet; the third makes one, 21 tokens in
    (the lens before issue 60 waited for 48 periodic tokens whatever the period)."""
    head = list(range(1000, 1040))
    assert not is_looping(head + periodic(7, 14))
    assert loop_period(head + periodic(7, 21)) == 7
    assert loop_period(head + periodic(2, 6)) == 2


def test_a_drifting_copy_stays_in_the_loop():
    unit = list(range(100, 108))
    copies = [unit] * 6
    copies[3] = unit[:5] + [999] + unit[6:]      # one copy drifts by a token
    tokens = list(range(1000, 1040)) + [t for c in copies for t in c]
    assert loop_period(tokens) == 8 and loop_period(tokens, drift=0.0) == 0


def test_a_loop_whose_unit_changes_is_caught_by_its_repeated_ngrams():
    """Lines that repeat with a changing name and length: no single period holds, but most of
    the tail repeats what came just before."""
    rng, tokens = random.Random(0), list(range(1000, 1040))
    for _ in range(12):
        tokens += [7, 8, 9] + [500 + rng.randrange(2) for _ in range(rng.choice([1, 4]))] + [10, 11]
    assert loop_period(tokens) == 0
    assert local_repeat_share(tokens) >= 0.6 and is_looping(tokens)


def test_random_text_is_not_a_loop():
    rng = random.Random(0)
    assert not any(is_looping([rng.randrange(4096) for _ in range(96)]) for _ in range(50))


def test_round_tags_read_the_output_before_each_round():
    """A prompt that repeats (a docstring's examples) is given text, not a loop: only the
    output counts; a round is looping once the output before it loops."""
    prompt = periodic(4, 40)                           # a periodic prompt
    tokens = list(range(200, 220)) + periodic(4, 80)   # 20 distinct, then a period-4 loop
    acc = [10, 10, 6, 24, 20, 30]                      # rounds start after 0, 10, 20, 26, 50, 70 tokens
    assert round_loop_flags(prompt, tokens, acc) == [False, False, False, False, True, True]
    flags = round_loop_flags(prompt, tokens, acc, committed=1)  # the first token before the rounds
    assert flags == [False, False, False, False, True, True]


def test_copyable_needs_the_lead_and_the_whole_block_earlier():
    context = [1, 2, 3, 4, 5, 6, 9, 9, 1, 2, 3]
    assert is_copyable(context, [4, 5]) and is_copyable(context, [4, 5, 6, 9])
    assert not is_copyable(context, [4, 7])            # the block departs
    assert not is_copyable([0, 1, 2, 3, 4, 8, 2, 3], [4])  # the lead (8, 2, 3) precedes 4 nowhere
    assert not is_copyable(context, [])                 # an empty block copies nothing
    assert LEAD == 3


@pytest.mark.parametrize("committed", [0, 1])
def test_round_tags_equal_their_plain_twin(committed):
    rng = random.Random(committed)
    for _ in range(60):
        vocab = rng.choice([3, 5, 50])
        prompt, tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))], []
        while len(tokens) < rng.randrange(0, 120):
            if tokens and rng.random() < 0.5:
                p = rng.randrange(1, 12)
                tokens += (tokens[-p:] * 5)[:rng.randrange(1, 40)]
            else:
                tokens.append(rng.randrange(vocab))
        acc, done = [], committed
        while done < len(tokens):
            acc.append(rng.randrange(1, 9))
            done += acc[-1]
        assert round_tags(prompt, tokens, acc, committed) == round_tags_reference(prompt, tokens, acc, committed)


def test_loop_split_counts_rounds_and_tau_by_tag():
    out = loop_split([1, 3, 8, 8], [False, False, True, True])
    assert out == {"tau": 5.0, "tau_outside_loops": 2.0, "loop_round_share": 0.5, "rounds": 4,
                   "rounds_outside_loops": 2}
    both = loop_split([1, 3, 8, 6], [False, False, True, False], [False, True, True, False])
    assert both["copyable_share"] == 0.5 and both["tau_copyable"] == 5.5 and both["tau_not_copyable"] == 3.5
    assert both["tau_clean"] == 3.5 and both["rounds_clean"] == 2
    assert math.isnan(loop_split([4], [True])["tau_outside_loops"])
    with pytest.raises(ValueError, match="looping"):
        loop_split([1, 2], [True])
    with pytest.raises(ValueError, match="copyable"):
        loop_split([1, 2], [True, False], [True])


def test_distinct_ngram_share():
    assert distinct_ngram_share(list(range(10))) == 1.0
    assert distinct_ngram_share(periodic(1, 10)) == pytest.approx(1 / 7)


@pytest.mark.parametrize("kwargs, name", [({"max_period": 0}, "max_period"), ({"repeats": 1}, "repeats"),
                                          ({"min_window": 1}, "min_window"), ({"drift": 0.5}, "drift")])
def test_bad_loop_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        loop_period([1, 2, 3], **kwargs)
