"""The comparison helpers hold on any machine and still catch a real difference."""
import pytest
import torch

from helpers import assert_close, assert_identical


def test_assert_close_scales_with_the_reference():
    ref = torch.tensor([1000.0, -2000.0], dtype=torch.float64)
    assert_close("rounding at scale 2e3", ref, ref + 1e-10, 1e-12)  # 1e-10 / 2e3 = 5e-14
    with pytest.raises(AssertionError):
        assert_close("a real error at scale 2e3", ref, ref + 1e-6, 1e-12)


def test_assert_close_is_absolute_below_one():
    ref = torch.full((4,), 1e-3, dtype=torch.float64)
    with pytest.raises(AssertionError):
        assert_close("small tensor, error above tol", ref, ref + 1e-9, 1e-12)


def test_tolerance_zero_is_refused_and_identity_is_its_own_helper(threads):
    x = torch.randn(5, dtype=torch.float64)
    with pytest.raises(ValueError, match="assert_identical"):
        assert_close("tol 0", x, x, 0.0)
    assert_identical("a copy", x, x.clone())
    with pytest.raises(AssertionError):
        assert_identical("one ulp", x, torch.nextafter(x, x + 1))
