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
    (root / "mla-drafter" / "model.safetensors").write_bytes(b"broken")
    with pytest.raises(ValueError, match="model.safetensors is corrupted"):
        load_pair("mla", root=root)
    (root / "mla-target" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="ddtree-lab train-target --arch mla"):
        load_pair("mla", root=root)
    with pytest.raises(ValueError, match="arch must be one of"):
        load_pair("rnn")


def published_copy(tmp_path, **dflash_config):
    """The shipped MLA drafter as a z-lab checkpoint would come: no manifest; ``dflash_config``
    entries overridden (config.json edited)."""
    import json
    d = tmp_path / "published"
    shutil.copytree(ckpt_path("mla", "drafter"), d)
    (d / "manifest.json").unlink()
    cfg = json.loads((d / "config.json").read_text())
    for key, value in dflash_config.items():
        (cfg["dflash_config"] if key in cfg["dflash_config"] else cfg)[key] = value
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_a_published_drafter_directory_without_manifest_loads(tmp_path):
    shipped = load_pair("mla")
    pair = load_pair("mla", ckpt_path("mla", "target"), published_copy(tmp_path))
    assert type(pair.drafter.model).__name__ == "DFlashDraftModel"
    assert pair.drafter_digest == shipped.drafter_digest  # the same weights: the same rows


@pytest.mark.parametrize("field, value, message", [
    ("target_layer_ids", [1, 2, 4, 9], r"target_layer_ids = \[1, 2, 4, 9\] does not fit the target \(layers 0..7\)"),
    ("mask_token_id", 5000, r"mask_token_id = 5000 does not fit the target \(vocabulary 0..4095\)"),
    ("vocab_size", 5000, r"vocab_size = 5000 does not fit the target \(4096\)"),
], ids=["layers", "mask", "vocab"])
def test_a_drafter_that_does_not_fit_is_a_clear_error(tmp_path, field, value, message):
    d = published_copy(tmp_path, **{field: value})
    with pytest.raises(ValueError, match=message):
        load_pair("mla", ckpt_path("mla", "target"), d)


def test_hidden_size_mismatch_and_block_size_over_the_drafters(tmp_path):
    from ddtree_lab import generate
    from ddtree_lab.core.drafter import DrafterConfig
    from ddtree_lab.train.drafters import check_drafter_fits
    pair = load_pair("mla")
    wide = DrafterConfig(**{**pair.drafter.cfg.__dict__, "hidden_size": 256, "target_hidden_size": 256})
    with pytest.raises(ValueError, match=r"hidden_size = 256 does not fit the target \(128\)"):
        check_drafter_fits(wide, pair.target)
    with pytest.raises(ValueError, match=r"block_size must be an int in \[2, 16\]"):
        generate(pair.target, pair.drafter, [5, 6, 7], method="dflash", block_size=32, max_new_tokens=4)


def test_a_dflash2_directory_loads_as_its_own_class(tmp_path):
    """A DFlash 2 drafter (grouped dynamic convolutions, candidate selector) in the published
    layout loads as ``DFlash2DraftModel``, every weight its own, and drafts (unary logits)."""
    from dflash import DFlash2DraftModel
    from transformers import Qwen3Config
    shipped = load_pair("mla")
    cfg = Qwen3Config(**{k: v for k, v in shipped.drafter.model.config.to_dict().items()
                         if k not in ("architectures", "dflash_config", "transformers_version", "dtype")})
    cfg.dflash_config = {**shipped.drafter.model.config.dflash_config, "conv_kernel_size": 3, "conv_group_size": 32,
                         "selector_rank": 8, "selector_top_k": 4}
    torch.manual_seed(0)
    model = DFlash2DraftModel(cfg)
    with torch.no_grad():
        for layer in model.layers:
            for conv in (layer.attention_conv, layer.mlp_conv):
                conv.base_kernel.normal_(0, 0.1)
    model.save_pretrained(tmp_path)
    pair = load_pair("mla", ckpt_path("mla", "target"), tmp_path)
    assert type(pair.drafter.model) is DFlash2DraftModel
    for (name, a), b in zip(model.state_dict().items(), pair.drafter.model.state_dict().values()):
        assert torch.equal(a.float(), b), name
    logits = pair.drafter.draft(pair.drafter.new_state(), torch.randn(4, pair.drafter.cfg.feature_size), 5, 8).logits
    assert logits.shape == (7, 4096) and torch.isfinite(logits).all()


def test_load_pair_dflash2_ships_the_dflash2_drafter_and_conditional_trees():
    from ddtree_lab.core.decode import tree_rule
    pair = load_pair("mla", drafter="dflash2")
    assert type(pair.drafter.model).__name__ == "DFlash2DraftModel" and pair.drafter.selector is not None
    assert tree_rule(pair.drafter, None).name == "conditional"
    assert tree_rule(load_pair("mla").drafter, None).name == "unary"
    assert pair.target_digest == load_pair("mla").target_digest
    with pytest.raises(ValueError, match=r"drafter must be one of \('dflash', 'dflash2'\)"):
        load_pair("mla", drafter="eagle")


def test_prompt_files_are_checked_line_by_line(tmp_path):
    from ddtree_lab.train.data import load_prompt_file
    good = tmp_path / "good.jsonl"
    good.write_text('{"q": "def f():"}\n\n{"q": "x = 1"}\n')
    assert load_prompt_file(good, "q") == ["def f():", "x = 1"]
    cases = {"missing.jsonl": (None, r"no such file"), "bad.jsonl": ("{oops\n", r"bad.jsonl:1: not a JSON line"),
             "nofield.jsonl": ('{"a": "x"}\n', r"nofield.jsonl:1: field 'q' missing \(the line has \['a'\]\)"),
             "number.jsonl": ('{"q": 3}\n', r"number.jsonl:1: field 'q' must be a non-empty string, got 3"),
             "empty.jsonl": ("\n", r"empty.jsonl: no prompt in the file")}
    for name, (text, message) in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=message):
            load_prompt_file(tmp_path / name, "q")


def test_a_pair_with_its_own_prompts_is_keyed_apart(tmp_path):
    from ddtree_lab import load_pair
    path = tmp_path / "p.jsonl"
    path.write_text('{"q": "def f():"}\n')
    pair = load_pair("mla")
    mine = pair.with_prompts(path, "q")
    assert "prompts" not in pair.digests and mine.digests["prompts"].endswith(":q")
    assert mine.num_prompts == 1 and mine.prompt_ids(0) == pair.tokenizer.encode("def f():").ids
    assert pair.num_prompts == 164
    with pytest.raises(ValueError, match=r"prompt index must be in \[0, 1\)"):
        mine.prompt_ids(1)
