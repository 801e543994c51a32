"""``load_pair(arch)``: the shipped target, its drafter and the tokenizer, checked."""
from __future__ import annotations

from pathlib import Path

from . import data
from .checkpoints import CKPT_DIR, REBUILD, check_manifest, ckpt_path
from ..core.models import ARCHS, arch_of, load_target


def load_pair(arch: str, root: Path = CKPT_DIR, target_path: Path | None = None,
              drafter_path: Path | None = None, **target_kwargs):
    """(target, drafter, tokenizer) for ``arch`` in {'gdn', 'mla'} from shipped files.

    Every file's sha256 is checked against its manifest; the drafter must have been trained
    for exactly this target. ``target_path``/``drafter_path`` point at other checkpoint
    directories (a real Qwen3.6 / Kimi checkpoint: ``target_kwargs`` go to ``load_target``,
    e.g. ``dtype=torch.bfloat16, device_map="auto"``).
    """
    from .rollouts import target_digest
    from .drafters import load_drafter
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
    man = check_manifest(dpath)
    if target_path is None and man.get("target_sha256") not in (None, target_digest(target)):
        raise ValueError(f"{dpath} was trained for another target than {tpath}; "
                         f"rebuild it with `{REBUILD['drafter'].format(arch=arch)}`")
    return target, drafter, data.load_tokenizer()
