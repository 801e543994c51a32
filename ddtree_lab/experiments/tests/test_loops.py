import math
import random

import pytest

from ddtree_lab.experiments.plumbing.loops import (distinct_ngram_share, is_looping, loop_period, loop_split,
                                          round_loop_flags)


def periodic(period: int, length: int, offset: int = 0) -> list[int]:
    return [offset + i % period for i in range(length)]


@pytest.mark.parametrize("period", [1, 2, 7, 24])
def test_periodic_tail_is_a_loop_with_its_smallest_period(period):
    tokens = list(range(1000, 1030)) + periodic(period, 48)
    assert is_looping(tokens) and loop_period(tokens) == period


def test_period_above_the_limit_or_short_tail_is_not_a_loop():
    assert not is_looping(periodic(25, 200))          # period 25 > max_period 24
    assert is_looping(periodic(25, 200), window=60, max_period=30)
    assert not is_looping(periodic(2, 47))            # fewer than window tokens
    tokens = periodic(3, 47) + [99]                   # the very last token breaks it
    assert not is_looping(tokens, window=48)


def test_random_text_is_not_a_loop():
    rng = random.Random(0)
    assert not any(is_looping([rng.randrange(4096) for _ in range(48)]) for _ in range(50))


def test_round_flags_follow_the_context_at_round_start():
    prompt = list(range(100, 130))                    # 30 distinct tokens
    tokens = list(range(200, 220)) + periodic(4, 80)  # 20 distinct, then a period-4 loop
    acc = [10, 10, 10, 20, 20, 30]                    # rounds start after 0, 10, 20, 30, 50, 70 tokens
    flags = round_loop_flags(prompt, tokens, acc)
    # the last 48 context tokens are all inside the loop only once 48 loop tokens are committed
    assert flags == [False, False, False, False, False, True]


def test_loop_split_counts_rounds_and_tau_outside():
    out = loop_split([1, 3, 8, 8], [False, False, True, True])
    assert out == {"tau": 5.0, "tau_outside_loops": 2.0, "loop_round_share": 0.5, "rounds": 4,
                   "rounds_outside_loops": 2}
    assert math.isnan(loop_split([4], [True])["tau_outside_loops"])
    with pytest.raises(ValueError, match="flags"):
        loop_split([1, 2], [True])


def test_distinct_ngram_share():
    assert distinct_ngram_share(list(range(10))) == 1.0
    assert distinct_ngram_share(periodic(1, 10)) == pytest.approx(1 / 7)


@pytest.mark.parametrize("kwargs, name", [({"window": 1}, "window"), ({"max_period": 48}, "max_period"),
                                          ({"max_period": 0}, "max_period")])
def test_bad_loop_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        is_looping([1, 2, 3], **kwargs)
