"""``load_pair(arch)``: a target, the drafter trained for it and the tokenizer, checked, as
one frozen ``Pair`` that carries the digests of both models' weights.

Everything downstream (sweeps, results stores, widgets) receives the pair explicitly; its
digests go into every stored row's key, so rows of different models never mix.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from . import data
from .checkpoints import CKPT_DIR, REBUILD, check_manifest, ckpt_path, weights_digest
from ..core.models import ARCHS, arch_of, load_target


@dataclass(frozen=True, eq=False)
class Pair:
    """target (a transformers causal LM), drafter (``DFlashDrafter``), tokenizer, arch
    ('gdn' / 'mla') and the sha256 digests of the target's and the drafter's weights.
    Unpacks as ``target, drafter, tokenizer = pair``."""
    arch: str
    target: object
    drafter: object
    tokenizer: object
    target_digest: str
    drafter_digest: str

    def __iter__(self):
        return iter((self.target, self.drafter, self.tokenizer))

    @property
    def tag(self) -> str:
        """Short name of the exact models: '{arch}-{target digest[:8]}-{drafter digest[:8]}'."""
        return f"{self.arch}-{self.target_digest[:8]}-{self.drafter_digest[:8]}"

    @property
    def digests(self) -> dict:
        """{'target': sha256, 'drafter': sha256}: what a results row records of its models."""
        return {"target": self.target_digest, "drafter": self.drafter_digest}


def drafter_digest(drafter) -> str:
    """``weights_digest`` of a drafter (its config included)."""
    return weights_digest(drafter, asdict(drafter.cfg))


def load_pair(arch: str, target_path: Path | str | None = None, drafter_path: Path | str | None = None,
              *, root: Path = CKPT_DIR, **target_kwargs) -> Pair:
    """The ``Pair`` for ``arch`` in {'gdn', 'mla'}: the shipped checkpoints under ``root``, or
    ``target_path`` / ``drafter_path`` (local checkpoint directories, e.g. a real Qwen3.6 or
    Kimi checkpoint and a drafter trained for it; ``target_kwargs`` go to ``load_target``,
    e.g. ``dtype=torch.bfloat16, device_map="auto"``).

    Every shipped file's sha256 is checked against its manifest, and a drafter whose
    manifest names its target must have been trained for exactly this target.
    """
    from .drafters import load_drafter
    from .rollouts import target_digest
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    tpath = Path(target_path or ckpt_path(arch, "target", root))
    if target_path is None:
        check_manifest(tpath, REBUILD["target"].format(arch=arch))
    target = load_target(tpath, **target_kwargs)
    if arch_of(target) != arch:
        raise ValueError(f"{tpath} holds a {arch_of(target)!r} model, expected {arch!r}")
    dpath = Path(drafter_path or ckpt_path(arch, "drafter", root))
    drafter = load_drafter(dpath, target)
    tdigest = target_digest(target)
    if check_manifest(dpath).get("target_sha256") not in (None, tdigest):
        raise ValueError(f"{dpath} was trained for another target than {tpath}; "
                         f"rebuild it with `{REBUILD['drafter'].format(arch=arch)}`")
    return Pair(arch, target, drafter, data.load_tokenizer(), tdigest, drafter_digest(drafter))
