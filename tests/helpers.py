"""What the tests share: ``assert_close`` (prints the error it saw), the toy target +
drafter pair, and a drafter that knows part of the answer (so losslessness tests really
accept draft tokens)."""
import torch

from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.models import build_target


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, tol: float) -> float:
    """max |ref - out| <= tol, printed either way; returns the error."""
    err = (ref - out).abs().max().item() if ref.numel() else 0.0
    print(f"{name}: max abs err {err:.3e} (tol {tol:.0e})")
    assert err <= tol, f"{name}: max abs err {err:.3e} > {tol:.0e}"
    return err


def toy_pair(preset: str = "gdn-toy", seed: int = 0, block_size: int = 8):
    """(target, drafter): a random toy target and a 1-layer random drafter (MASK = last id)."""
    target = build_target(preset, seed=seed)
    cfg = DrafterConfig.for_target(target, mask_token_id=target.config.vocab_size - 1, num_layers=1,
                                   block_size=block_size)
    torch.manual_seed(seed + 1)
    return target, DFlashDrafter(cfg, target).eval()


class HintedDrafter:
    """A real drafter whose proposals are nudged toward a known continuation ``sequence``
    (prompt + the target's AR output) at depths d with (position + d) % 3 != 0, so rounds
    accept several draft tokens and still reject some: both paths of the accept walk run.
    The hint is the target's own output, so a verify bug still shows as output != AR."""

    def __init__(self, drafter: DFlashDrafter, sequence: list[int], boost: float = 30.0):
        self.drafter, self.sequence, self.boost = drafter, list(sequence), boost
        self.cfg = drafter.cfg

    def new_state(self):
        return self.drafter.new_state()

    def propose(self, state, new_features, last_token: int, block_size: int) -> torch.Tensor:
        logits = self.drafter.propose(state, new_features, last_token, block_size).clone()  # [bs-1, V]
        root = state.length  # position of ``last_token``: every earlier row is in the context
        for d in range(1, block_size):
            if root + d < len(self.sequence) and (root + d) % 3:
                logits[d - 1, self.sequence[root + d]] += self.boost
        return logits


class BatchHintedDrafter:
    """``HintedDrafter`` per sequence: the k-th ``new_state`` belongs to the k-th prompt."""

    def __init__(self, drafter, sequences):
        self.hinted = [HintedDrafter(drafter, s) for s in sequences]
        self.cfg, self.owner = drafter.cfg, {}

    def new_state(self):
        state = self.hinted[len(self.owner)].new_state()
        self.owner[id(state)] = self.hinted[len(self.owner)]
        return state

    def propose(self, state, new_features, last_token, block_size):
        return self.owner[id(state)].propose(state, new_features, last_token, block_size)
