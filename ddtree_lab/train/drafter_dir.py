"""Whether a directory holds a DFlash drafter, read from its config.json alone: no torch, so the
command line checks ``--drafter`` as argparse reads it (``app/cli.py``)."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

DRAFTER_KEYS = {"dflash_config", "target_layer_ids", "num_target_layers", "mask_token_id"}


def check_drafter_dir(path: Path) -> Path:
    """``path`` when its config.json is a DFlash drafter's (``dflash_config``, or the drafter keys
    ``target_layer_ids`` / ``num_target_layers`` / ``mask_token_id`` at the top level, as
    ``DrafterConfig.from_qwen3_config`` reads them), else a ``ValueError`` naming what the directory holds (a target's checkpoint,
    say) and the command that trains a drafter for it."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} holds no config.json: a drafter directory holds a published DFlash checkpoint")
    cfg = json.loads((path / "config.json").read_text())
    if not DRAFTER_KEYS & cfg.keys():
        raise ValueError(f"{path} holds a {'/'.join(cfg.get('architectures') or [cfg.get('model_type', '?')])} "
                         f"checkpoint, not a DFlash drafter (its config.json has no dflash_config); "
                         f"for a target, `ddtree-lab train-drafter --target {shlex.quote(str(path))} --out "
                         f"{shlex.quote(str(path) + '-drafter')}` trains one")
    return path
