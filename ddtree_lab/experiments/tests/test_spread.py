"""spread.py: the order-statistic interval has the coverage it claims (checked against the
binomial sum written out), the sign test on hand-counted cases, and the labels of a ratio
inside and outside the noise."""
import math

import numpy as np
import pytest

from ddtree_lab.experiments.plumbing import spread


def coverage(n: int, k: int) -> float:
    """P(r_(k) <= median <= r_(n+1-k)) = 1 - 2 P(Bin(n, 1/2) <= k - 1), written out."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


@pytest.mark.parametrize("n", [5, 6, 10, 15, 30], ids=lambda n: f"n{n}")
def test_interval_rank_is_the_widest_rank_with_the_coverage(n):
    k = spread.median_interval_rank(n)
    print(f"n={n}: k={k}, coverage {coverage(n, k) if k else float('nan'):.4f}")
    if k:
        assert coverage(n, k) >= 0.95
    assert k + 1 > (n + 1) // 2 or coverage(n, k + 1) < 0.95
    assert (n, k) in {(5, 0), (6, 1), (10, 2), (15, 4), (30, 10)}


def test_sign_test_hand_counted():
    assert spread.sign_test([2.0] * 10) == pytest.approx(2 / 2 ** 10)
    assert spread.sign_test([2.0] * 5 + [0.5] * 5) == 1.0
    assert spread.sign_test([1.0, 1.0, 2.0]) == 1.0       # ties dropped: one pair left
    assert spread.sign_test([]) == 1.0


def test_paired_ratio_separates_a_real_gap_from_noise():
    rng = np.random.default_rng(0)
    base = 10 + rng.random(15)
    slower = spread.paired_ratio(1.5 * base * (1 + 0.02 * rng.standard_normal(15)), base)
    same = spread.paired_ratio(base * (1 + 0.02 * rng.standard_normal(15)), base)
    print(slower, same, sep="\n")
    assert slower["n"] == 15
    assert slower["lo"] > 1 and slower["p_sign"] < 1e-3 and slower["within_noise"] is False
    assert same["within_noise"] is True and same["p_sign"] > 0.05
    few = spread.paired_ratio([1.0, 2.0], [1.0, 1.0])
    assert math.isnan(few["lo"]) and few["within_noise"] is None and few["median"] == 1.5
    with pytest.raises(ValueError, match="1-D"):
        spread.paired_ratio([1.0], [1.0, 2.0])


def test_paired_ratio_known_answer():
    """Pairs whose ratios are 1..10 (shuffled, over unequal denominators): median 5.5; n = 10
    gives k = 2, so the interval is [r_(2), r_(9)] = [2, 9]; the tie with 1 is dropped and 9
    ratios lie above, so p = 2 / 2**9. Pairing matters: the ratio of the medians is not 5.5."""
    r = np.array([7.0, 2.0, 10.0, 1.0, 5.0, 9.0, 3.0, 8.0, 6.0, 4.0])
    den = np.array([3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0, 6.0, 5.5, 3.5])
    got = spread.paired_ratio(r * den, den)
    print(got, "ratio of medians:", np.median(r * den) / np.median(den))
    assert got == {"n": 10, "median": 5.5, "lo": 2.0, "hi": 9.0, "p_sign": pytest.approx(2 / 2 ** 9),
                   "within_noise": False}
    assert np.median(r * den) / np.median(den) != pytest.approx(5.5)


def test_ratio_columns_and_labels():
    cols = spread.ratio_columns("wy/naive", [1.0] * 10, [1.0] * 9 + [2.0])
    assert list(cols) == ["wy/naive", "wy/naive_lo", "wy/naive_hi", "wy/naive_p"]
    assert spread.format_ratio(0.99, 0.97, 1.02) == "0.99x [0.97, 1.02] noise"
    assert spread.format_ratio(1.42, 1.35, 1.5) == "1.42x [1.35, 1.50]"
    assert spread.format_ratio(0.054, 0.05, 0.059, percent=True) == "5.4% [5.0, 5.9]"
    assert spread.format_ratio_columns({"a": 2.0}, "a") == "2.00x"   # an older file: no interval stored
