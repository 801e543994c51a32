"""The shipped checkpoints: load_pair checks them, and the local-directory path a researcher
uses for a real checkpoint is the same code, exercised here at tiny size."""
import shutil

import pytest
import torch

from ddtree_lab import Pair, generate, load_pair
from ddtree_lab.train.checkpoints import ckpt_path
from ddtree_lab.train.data import prompt_tokens


@pytest.mark.parametrize("arch", ["gdn", "mla"])
def test_shipped_pair_loads_and_decodes_losslessly(arch):
    pair = load_pair(arch)
    target, drafter, tok = pair
    assert isinstance(pair, Pair) and pair.arch == arch and pair.tag.startswith(f"{arch}-")
    assert len(pair.target_digest) == len(pair.drafter_digest) == 64
    ids = prompt_tokens(tok, 0)
    ar = generate(target, None, ids, method="ar", max_new_tokens=12)
    dd = generate(target, drafter, ids, method="ddtree", budget=16, block_size=8, max_new_tokens=12)
    assert dd.tokens == ar.tokens and dd.tau > 1.0


def test_a_local_checkpoint_directory_loads_through_the_same_path(tmp_path):
    tdir, ddir = tmp_path / "my-qwen", tmp_path / "my-drafter"
    shutil.copytree(ckpt_path("gdn", "target"), tdir)
    shutil.copytree(ckpt_path("gdn", "drafter"), ddir)
    mine, shipped = load_pair("gdn", tdir, ddir), load_pair("gdn")
    ids = torch.arange(5, 25)
    assert torch.equal(mine.target(ids[None]).logits, shipped.target(ids[None]).logits)
    assert mine.digests == shipped.digests  # same weights, wherever they live: rows are shared
    with torch.no_grad():
        next(mine.target.parameters()).add_(1.0)
    from ddtree_lab.train.rollouts import target_digest
    assert target_digest(mine.target) != shipped.target_digest  # changed weights: a new digest


def test_missing_and_corrupted_files_say_what_to_do(tmp_path):
    root = tmp_path / "ckpts"
    shutil.copytree(ckpt_path("mla", "target"), root / "mla-target")
    shutil.copytree(ckpt_path("mla", "drafter"), root / "mla-drafter")
    load_pair("mla", root=root)  # moved elsewhere, the drafter still knows its target
    (root / "mla-drafter" / "drafter.safetensors").write_bytes(b"broken")
    with pytest.raises(ValueError, match="drafter.safetensors is corrupted"):
        load_pair("mla", root=root)
    (root / "mla-target" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="ddtree-lab train-target --arch mla"):
        load_pair("mla", root=root)
    with pytest.raises(ValueError, match="arch must be one of"):
        load_pair("rnn")
