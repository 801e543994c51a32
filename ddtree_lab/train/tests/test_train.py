"""Training: resumable loop, toy-size train commands, shipped-file checks, clean data."""

import numpy as np
import pytest
import torch

from ddtree_lab.train import data, drafters
from ddtree_lab.train.checkpoints import check_manifest
from ddtree_lab.core.models import build_target
from ddtree_lab.train.targets import train_target
from ddtree_lab.train.loop import TrainConfig, lm_loss_fn, train

STREAM = (np.arange(5000) * 7 % 61).astype(np.uint16)


def _run(out_dir, interrupt_at=None):
    torch.manual_seed(0)
    model = build_target("gdn-toy")
    base = lm_loss_fn(STREAM, 2, 16)
    calls = {"n": 0}

    def loss_fn(m, rng):
        calls["n"] += 1
        if interrupt_at is not None and calls["n"] == interrupt_at:
            raise KeyboardInterrupt("simulated kill")
        return base(m, rng)
    cfg = TrainConfig(max_tokens=8 * 2 * 16, batch_size=2, seq_len=16, warmup_steps=2, eval_every=4,
                      ckpt_every_s=0.0)
    state = train(model, loss_fn, lambda m: 1.0, cfg, out_dir)
    return model, state


def test_interrupted_training_resumes_to_the_same_weights(tmp_path):
    straight, st = _run(tmp_path / "straight")
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "killed", interrupt_at=5)
    saved = torch.load(tmp_path / "killed" / "train_state.pt", weights_only=False)
    assert saved["state"]["step"] == 4  # the last finished step was checkpointed
    resumed, st2 = _run(tmp_path / "killed")
    assert st2["step"] == st["step"] == 8
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    rows = (tmp_path / "killed" / "log.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["4", "8"]  # no duplicated log rows


@pytest.mark.parametrize("arch", ["gdn", "mla"])
def test_train_target_toy_ships_a_loadable_checkpoint(arch, tmp_path):
    out = tmp_path / f"{arch}-target"
    man = train_target(arch, "toy", out=out, runs_dir=tmp_path / "runs")
    assert set(man["files"]) >= {"config.json", "model.safetensors"}
    assert man["preset"] == "toy" and np.isfinite(man["final_val_loss"])
    assert check_manifest(out)["final_val_loss"] == man["final_val_loss"]
    again = train_target(arch, "toy", out=out, runs_dir=tmp_path / "runs")  # resumes: no new steps
    assert again["train_state"]["step"] == man["train_state"]["step"]


def test_corrupted_and_missing_files_are_named(tmp_path):
    out = tmp_path / "gdn-target"
    train_target("gdn", "toy", out=out, runs_dir=tmp_path / "runs")
    good = (out / "config.json").read_text()
    (out / "config.json").write_text(good + " ")
    with pytest.raises(ValueError, match="config.json is corrupted"):
        check_manifest(out, "ddtree-lab train-target --arch gdn")
    (out / "config.json").write_text(good)
    (out / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing.*train-target"):
        check_manifest(out, "ddtree-lab train-target --arch gdn")


def test_no_humaneval_prompt_is_in_the_training_text():
    texts = data.corpus_texts()
    corpus = "\0".join(texts["train"] + texts["val"])
    probs = data.humaneval_problems()
    assert len(probs) == 164
    leaked = [p["task_id"] for p in probs if p["prompt"].strip() in corpus]
    assert not leaked, leaked


def test_corpus_manifest_identifies_the_corpus():
    split = data.corpus_texts()
    man = data.manifest(split)
    assert man["train"]["files"] > 500 and man["val"]["files"] > 10
    assert 8e6 < man["train"]["bytes"] + man["val"]["bytes"] < 2e7
    other = data.manifest({"train": split["train"][1:], "val": split["val"]})
    assert other["train"]["sha256"] != man["train"]["sha256"]


def test_time_schedule_ends_on_the_wall_clock(tmp_path):
    """A wall-clock schedule: warmup by steps, cosine over max_minutes, training stops at 1."""
    from ddtree_lab.train.loop import lr_at, progress
    cfg = TrainConfig(max_tokens=10**9, batch_size=2, seq_len=8, lr=1e-2, warmup_steps=2,
                      max_minutes=0.02, time_schedule=True, eval_every=10**6)
    assert progress(cfg, 5, 0.6) == 0.5 and progress(cfg, 5, 5.0) == 1.0
    assert lr_at(cfg, 0) == 5e-3 and abs(lr_at(cfg, 10, 1.2) - 1e-3) < 1e-12
    with pytest.raises(ValueError, match="max_minutes"):
        TrainConfig(max_tokens=10, time_schedule=True)
    model = build_target("gdn-toy")
    tokens = np.random.default_rng(0).integers(0, 64, 4096).astype(np.uint16)
    st = train(model, lm_loss_fn(tokens, 2, 8), lambda m: 0.0, cfg, tmp_path)
    assert 1.2 <= st["elapsed_s"] < 10 and st["stopped_by"] is None and st["step"] > 2


def test_the_corpus_share_splits_every_batch_and_weighs_each_part_by_its_count(monkeypatch):
    """``drafter_loss_fn``: round(batch * share) sequences from the real-code windows, each part's
    loss weighted by its share of the batch (0.5 of 8: the old half-and-half mean)."""
    calls = []

    def fake_loss(drafter, tokens, features, anchors, soft=None):
        calls.append((len(tokens), soft is not None))
        return torch.tensor(float(tokens[0, 0]))  # each source's sequences start with its own id

    monkeypatch.setattr(drafters, "drafter_loss", fake_loss)
    monkeypatch.setattr(drafters, "sample_anchors", lambda source, n, anchors, rng: None)
    roll = {"tokens": torch.full((4, 6), 1), "features": torch.zeros(4, 6, 2)}
    corpus = {"tokens": torch.full((4, 6), 3), "features": torch.zeros(4, 6, 2),
              "soft_ids": torch.zeros(4, 6, 2, dtype=torch.int32), "soft_probs": torch.ones(4, 6, 2)}
    rng = np.random.default_rng(0)
    drafter = torch.nn.Linear(1, 1)
    for share, n_corpus in ((0.0, 0), (0.25, 2), (0.5, 4), (1.0, 8)):
        calls.clear()
        loss = drafters.drafter_loss_fn(roll, 8, 3, corpus, corpus_share=share)(drafter, rng)
        assert loss.item() == pytest.approx((1 * (8 - n_corpus) + 3 * n_corpus) / 8)
        assert calls == [c for c in ((8 - n_corpus, False), (n_corpus, True)) if c[0]]


@pytest.mark.parametrize("arch", ["gdn", "mla"])
def test_the_default_recipe_of_a_shipped_target_rebuilds_what_ships(arch):
    """`train-drafter --arch A` (and `train-drafter2`) train with the knobs the shipped drafters
    were trained with, read from their manifests: the real-code share, the depth, the steps and
    the labels; a target of one's own (arch None) and the other presets keep the preset."""
    import json
    from ddtree_lab.train.checkpoints import ckpt_path
    for kind, recipes in (("drafter", drafters.RECIPES), ("drafter2", drafters.DFLASH2_RECIPES)):
        shipped = json.loads((ckpt_path(arch, kind) / "manifest.json").read_text())["recipe"]
        recipe = drafters.preset_recipe(recipes, "default", arch)
        assert (recipe.corpus_share, recipe.train.max_tokens, recipe.soft_top_k, recipe.rollout_soft) == (
            shipped["corpus_share"], shipped["train"]["max_tokens"], shipped["soft_top_k"], shipped["rollout_soft"])
        if kind == "drafter":
            assert recipe.num_layers == shipped["num_layers"]
    assert drafters.preset_recipe(drafters.RECIPES, "default", None) == drafters.RECIPES["default"]
    assert drafters.preset_recipe(drafters.RECIPES, "quick", arch) == drafters.RECIPES["quick"]
    with pytest.raises(ValueError, match="preset must be one of"):
        drafters.preset_recipe(drafters.RECIPES, "huge", arch)


def test_a_dflash2_manifest_records_the_depth_of_the_drafter_it_starts_from(tmp_path, monkeypatch):
    """The DFlash 2 recipe's depth is the DFlash drafter's (a 2-layer toy drafter here, where
    the toy preset says 1), as its config is."""
    import json
    from dataclasses import replace
    target = build_target("gdn-toy")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 63, size=int(rng.integers(8, 14))).tolist() for _ in range(8)]
    kw = dict(target=target, prompts=prompts, cache_dir=tmp_path / "cache")
    monkeypatch.setitem(drafters.RECIPES, "toy", replace(drafters.RECIPES["toy"], num_layers=2))
    drafters.train_drafter("gdn", "toy", mask_token_id=63, out=tmp_path / "d", runs_dir=tmp_path / "r", **kw)
    drafter = drafters.load_drafter(tmp_path / "d", target)
    assert drafter.cfg.num_layers == 2 != drafters.DFLASH2_RECIPES["toy"].num_layers
    man = drafters.train_drafter2("gdn", "toy", drafter=drafter, out=tmp_path / "d2", runs_dir=tmp_path / "r2", **kw)
    assert man["recipe"]["num_layers"] == man["drafter_config"]["num_layers"] == 2
    assert json.loads((tmp_path / "d2" / "manifest.json").read_text())["recipe"]["num_layers"] == 2
