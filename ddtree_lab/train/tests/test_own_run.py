"""A drafter for a target of one's own (issue 58), the parts that run in seconds: the tokenizer
comes from the target directory or ``tokenizer=``, never from a silent fallback; a training run
is never resumed for another target (its state records the target's digest); fewer ``steps``
make that share of the preset's rollouts and real-code windows, ``rollouts`` sets them."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from ddtree_lab.common import ROOT
from ddtree_lab.train import data, drafters
from ddtree_lab.train.checkpoints import ckpt_path
from ddtree_lab.train.drafters import RECIPES, scaled_data, train_drafter
from ddtree_lab.train.loop import TrainConfig, train
from ddtree_lab.train.pair import load_tokenizer_for

LAB_TOKENIZER = ROOT / "data" / "tokenizer.json"


def test_the_tokenizer_is_the_targets_own_or_the_one_given(tmp_path):
    own = tmp_path / "own"
    PreTrainedTokenizerFast(tokenizer_object=data.load_tokenizer()).save_pretrained(own)
    assert load_tokenizer_for(own).get_vocab_size() == 4096
    assert load_tokenizer_for(ckpt_path("gdn", "target")).get_vocab_size() == 4096  # a target the lab trained
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ValueError, match=r"bare holds no tokenizer .*: pass --tokenizer DIR"):
        load_tokenizer_for(bare)
    assert load_tokenizer_for(bare, LAB_TOKENIZER).get_vocab_size() == 4096  # a tokenizer.json
    assert load_tokenizer_for(bare, own).get_vocab_size() == 4096           # a directory of tokenizer files
    with pytest.raises(ValueError, match="--tokenizer must be a directory with tokenizer.json"):
        load_tokenizer_for(own, bare)
    (bare / "manifest.json").write_text(json.dumps({"files": {}}))  # a manifest the lab's training did not write
    with pytest.raises(ValueError, match="holds no tokenizer"):
        load_tokenizer_for(bare)


def test_a_copy_of_a_shipped_target_without_its_tokenizer_files_is_refused(tmp_path):
    """One rule, no exception (issue 66): the shipped target holds its tokenizer files; a copy
    without them is refused even though its manifest says the lab trained it."""
    copy = tmp_path / "copy"
    shutil.copytree(ckpt_path("gdn", "target"), copy)
    assert "train_cfg" in json.loads((copy / "manifest.json").read_text())
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).unlink()
    with pytest.raises(ValueError, match="copy holds no tokenizer"):
        load_tokenizer_for(copy)


def _fit(out, identity, steps: int = 2) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    cfg = TrainConfig(max_tokens=steps, batch_size=1, seq_len=1, warmup_steps=1, eval_every=1)
    loss = lambda m, rng: m(torch.ones(3)).square().sum()  # noqa: E731
    return train(model, loss, lambda m: 0.0, cfg, out, identity=identity)


def test_a_run_of_another_target_is_never_resumed(tmp_path):
    """A finished run resumes (no new step) for its own target; for another, or from a state that
    names none, it is refused: shipping its weights under the new target's digest would be wrong."""
    mine, other = {"target_sha256": "a" * 64, "kind": "drafter"}, {"target_sha256": "b" * 64, "kind": "drafter"}
    assert _fit(tmp_path / "run", mine)["step"] == 2
    assert _fit(tmp_path / "run", mine)["step"] == 2
    with pytest.raises(ValueError, match=r"run holds the run of a model for target_sha256 aaaaaaaaaaaa, .*, not of "
                                         r"a model for target_sha256 bbbbbbbbbbbb.*delete .*run to start over"):
        _fit(tmp_path / "run", other)
    _fit(tmp_path / "legacy", None)
    with pytest.raises(ValueError, match="holds the run of a model it does not name"):
        _fit(tmp_path / "legacy", mine)


def test_fewer_steps_make_less_data_and_rollouts_set_it():
    quick = RECIPES["quick"]
    cycle = quick.gen_batch * len(quick.temperatures)  # one batch of each temperature: greedy ones held out
    assert scaled_data(quick, 0.3).num_rollouts == max(cycle, 96)
    assert scaled_data(quick, 0.9).num_rollouts == 288 and scaled_data(quick, 0.9).corpus_windows == 144
    assert scaled_data(quick, 0.01).corpus_windows == quick.train.batch_size


class Planned(Exception):
    """Raised by the stand-in for ``training_data``: the recipe train_drafter settled on."""


@pytest.mark.parametrize("knobs,rollouts,steps", [({}, 320, 500), ({"steps": 250}, 160, 250),
                                                  ({"steps": 250, "rollouts": 40}, 40, 250),
                                                  ({"steps": 5000}, 320, 5000)])
def test_train_drafter_scales_the_rollouts_with_the_steps(knobs, rollouts, steps, monkeypatch, capsys):
    def planned(target, recipe, *args):
        raise Planned(recipe)
    monkeypatch.setattr(drafters, "training_data", planned)
    from ddtree_lab.core.models import build_target
    with pytest.raises(Planned) as got:
        train_drafter("gdn", "quick", target=build_target("gdn-toy"), mask_token_id=63, **knobs)
    recipe = got.value.args[0]
    assert (recipe.num_rollouts, recipe.train.total_steps) == (rollouts, steps)
    assert capsys.readouterr().out.startswith(f"train-drafter: {rollouts} target rollouts")  # the plan, before any work
