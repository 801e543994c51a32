"""What the tests share: ``assert_close`` (prints the error it saw), the toy target +
drafter pair, and a drafter that knows part of the answer (so losslessness tests really
accept draft tokens)."""
import torch

from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig, Draft
from ddtree_lab.core.models import build_target


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, tol: float) -> float:
    """Scale-aware closeness: max |ref - out| <= tol * max(1, max |ref|), printed either way.

    ``tol`` is a relative tolerance for tensors larger than 1 and an absolute one below (so a
    BLAS that rounds differently on another CPU stays inside it). A tolerance of 0 is refused:
    where bit-identity is the claim, use ``assert_identical``. Returns the scaled error.
    """
    if tol <= 0:
        raise ValueError(f"{name}: tol must be > 0 (got {tol}); use assert_identical for bit-identity")
    if not ref.numel():
        return 0.0
    diff = (ref.double() - out.double()).abs()
    scale = max(1.0, ref.double().abs().max().item())
    err = diff.max().item() / scale
    rms = diff.square().mean().sqrt().item() / max(ref.double().square().mean().sqrt().item(), 1e-30)
    print(f"{name}: max err {err:.3e} (scale {scale:.2g}, tol {tol:.0e}), relative rms {rms:.2e}")
    assert err <= tol, f"{name}: max err {err:.3e} > tol {tol:.0e} (scale {scale:.2g})"
    return err


def assert_identical(name: str, ref: torch.Tensor, out: torch.Tensor) -> None:
    """Bit-identity (same shape, dtype and bits): only where that is the claim (copies, gathers,
    a result recomputed by the very same kernels). Tests that call it run under 1 and 2 torch
    threads (the ``threads`` fixture)."""
    assert ref.shape == out.shape and ref.dtype == out.dtype, \
        f"{name}: {tuple(ref.shape)}/{ref.dtype} vs {tuple(out.shape)}/{out.dtype}"
    err = (ref.double() - out.double()).abs().max().item() if ref.numel() else 0.0
    print(f"{name}: bit-identical {torch.equal(ref, out)} (max abs err {err:.3e})")
    assert torch.equal(ref, out), f"{name}: not bit-identical, max abs err {err:.3e}"


def toy_pair(preset: str = "gdn-toy", seed: int = 0, block_size: int = 8):
    """(target, drafter): a random toy target and a 1-layer random drafter (MASK = last id)."""
    target = build_target(preset, seed=seed)
    cfg = DrafterConfig.for_target(target, mask_token_id=target.config.vocab_size - 1, num_layers=1,
                                   block_size=block_size)
    torch.manual_seed(seed + 1)
    return target, DFlashDrafter.from_config(cfg, target).eval()


def toy_dflash2(preset: str = "gdn-toy", seed: int = 0, scale: float = 3.0):
    """(target, DFlash 2 drafter): ``toy_pair``'s drafter as a ``DFlash2DraftModel``
    (``dflash2_from``: top-4 candidates, rank 8), its selector's codebooks randomised (x
    ``scale``) so children depend on the parent."""
    from ddtree_lab.train.drafters import dflash2_from
    target, drafter = toy_pair(preset, seed=seed)
    d2 = dflash2_from(drafter, target, selector_rank=8, selector_top_k=4)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for emb in (d2.selector.predecessor_codebook, d2.selector.successor_codebook):
            emb.weight.copy_(torch.randn(emb.weight.shape, generator=gen) * scale)
    return target, d2.eval()


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

    selector = None

    def draft(self, state, new_features, last_token: int, block_size: int) -> Draft:
        return Draft(self.propose(state, new_features, last_token, block_size))


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

    def propose_batch(self, states, new_features, last_tokens, block_size) -> torch.Tensor:
        """[B, bs-1, V]: each state's own hinted proposal."""
        return torch.stack([self.propose(*args, block_size) for args in zip(states, new_features, last_tokens)])

    selector = None

    def draft_batch(self, states, new_features, last_tokens, block_size) -> list:
        return [Draft(row) for row in self.propose_batch(states, new_features, last_tokens, block_size)]
