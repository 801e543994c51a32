import pytest
import torch

from helpers import toy_pair
from ddtree_lab.experiments.studies.teacher_forced import accepted_at, accepted_at_reference, teacher_forced


@pytest.mark.parametrize("preset, mode", [("gdn-toy", "wy"), ("gdn-toy", "fork"), ("mla-toy", "wy")])
def test_one_verify_serves_every_budget(preset, mode):
    target, drafter = toy_pair(preset)
    g = torch.Generator().manual_seed(3)
    budgets = [1, 3, 8, 20]
    for length in (2, 9, 17):
        context = torch.randint(0, target.config.vocab_size - 1, (length,), generator=g)
        fast = accepted_at(target, drafter, context, budgets, 6, mode)
        assert fast == accepted_at_reference(target, drafter, context, budgets, 6, mode)
        assert all(1 <= fast[b] <= 6 for b in budgets)
        assert [fast[b] for b in budgets] == sorted(fast[b] for b in budgets)  # prefix trees: monotone


@pytest.mark.parametrize("tree", ["conditional", "unary"])
def test_one_verify_serves_every_budget_of_a_dflash2_drafter(tree):
    """Conditional trees are best-first too: every smaller budget's tree is a prefix."""
    from helpers import toy_dflash2
    target, drafter = toy_dflash2("mla-toy")
    g = torch.Generator().manual_seed(5)
    for length in (3, 12):
        context = torch.randint(0, target.config.vocab_size - 1, (length,), generator=g)
        fast = accepted_at(target, drafter, context, [1, 4, 9, 30], 6, "wy", tree=tree)
        assert fast == accepted_at_reference(target, drafter, context, [1, 4, 9, 30], 6, "wy", tree=tree)


def test_frame_has_every_position_every_stride_and_both_methods():
    target, drafter = toy_pair("mla-toy")
    texts = [torch.randint(0, 60, (40,)).tolist(), torch.randint(0, 60, (30,)).tolist()]
    frame = teacher_forced(target, drafter, texts, [5, 10], budgets=(2, 8), block_size=5, stride=7,
                           progress=False)
    assert set(frame.method) == {"dflash", "ddtree"}
    assert frame.acceptance.between(1, 5).all()
    assert frame.groupby("text").position.unique().map(list).tolist() == [[5, 12, 19, 26, 33], [10, 17, 24]]
    assert len(frame) == 8 * 3  # dflash + 2 budgets per position


def test_naive_mode_is_refused():
    target, drafter = toy_pair("gdn-toy")
    with pytest.raises(ValueError, match="gdn_mode"):
        teacher_forced(target, drafter, [[1, 2, 3]], [1], gdn_mode="naive")
