"""The shipped checkpoints: load_pair checks them, and the local-directory path a researcher
uses for a real checkpoint is the same code, exercised here at tiny size."""
import shutil

import pytest
import torch

from ddtree_lab.app import lab
from ddtree_lab.train.checkpoints import ckpt_path
from ddtree_lab.core.decode import generate
from ddtree_lab.train.pair import load_pair


@pytest.mark.parametrize("arch", ["gdn", "mla"])
def test_shipped_pair_loads_and_decodes_losslessly(arch):
    target, drafter, tok = load_pair(arch)
    ids = lab.prompt_tokens(tok, 0)
    ar = generate(target, None, ids, method="ar", max_new_tokens=12)
    dd = generate(target, drafter, ids, method="ddtree", budget=16, block_size=8, max_new_tokens=12)
    assert dd.tokens == ar.tokens and dd.tau > 1.0


def test_a_local_checkpoint_directory_loads_through_the_same_path(tmp_path):
    tdir, ddir = tmp_path / "my-qwen", tmp_path / "my-drafter"
    shutil.copytree(ckpt_path("gdn", "target"), tdir)
    shutil.copytree(ckpt_path("gdn", "drafter"), ddir)
    target, drafter, _ = lab.load_pair("gdn", {"gdn": (tdir, ddir)})
    shipped, _, _ = load_pair("gdn")
    ids = torch.arange(5, 25)
    assert torch.equal(target(ids[None]).logits, shipped(ids[None]).logits)
    from ddtree_lab.experiments.sweep import pair_tag
    assert pair_tag().startswith("gdn_")  # results of this model go to their own store
    lab.load_pair("gdn")  # back to the shipped pair for the other tests
    assert pair_tag() == ""


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
