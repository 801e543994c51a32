"""Shared test setup: tiny models on one CPU thread (small ops run fastest, and the suite
never oversubscribes a machine that is also training), and one toy target + drafter pair."""
import torch

from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.models import build_target

torch.set_num_threads(1)


def toy_pair(preset: str = "gdn-toy", seed: int = 0, block_size: int = 8):
    """(target, drafter): a random toy target and a 1-layer random drafter (MASK = last id)."""
    target = build_target(preset, seed=seed)
    cfg = DrafterConfig.for_target(target, mask_token_id=target.config.vocab_size - 1, num_layers=1,
                                   block_size=block_size)
    torch.manual_seed(seed + 1)
    return target, DFlashDrafter(cfg, target).eval()
