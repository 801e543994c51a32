"""``tiny_target`` (the README walk-through's first command) trains for a count of steps, so the
same seed gives the same model whatever the machine's load (the CI failure of stop 73: a
wall-clock minute on a busy machine trained fewer steps, and its target looped). A hybrid
family keeps these fast: it has no unlikelihood phase."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from ddtree_lab.app.cli import main
from ddtree_lab.train.targets import tiny_target


@pytest.mark.parametrize("kwargs, message", [({"steps": -1}, "steps must be an int >= 0"),
                                             ({"steps": 2.5}, "steps must be an int >= 0"),
                                             ({"minutes": 0}, "minutes must be > 0"),
                                             ({"family": "rnn"}, "family must be one of")])
def test_bad_input_is_refused_by_name(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_target(tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())


def test_the_same_seed_and_steps_give_the_same_weights_at_any_thread_count_and_another_seed_does_not(tmp_path):
    """It trains on one thread whatever torch's count (restored after), so the caller's count
    changes nothing."""
    before = torch.get_num_threads()
    runs = {}
    try:
        for name, seed, threads in (("a", 0, 1), ("b", 0, 2), ("c", 1, 1)):
            torch.set_num_threads(threads)
            runs[name] = tiny_target(tmp_path / name, steps=3, seed=seed, family="short_conv")
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    assert {m["steps"] for m in runs.values()} == {3}
    weights = {name: load_file(tmp_path / name / "model.safetensors") for name in runs}
    assert all(torch.equal(weights["a"][k], weights["b"][k]) for k in weights["a"])   # bit-identity is the claim
    assert not all(torch.equal(weights["a"][k], weights["c"][k]) for k in weights["a"])


def test_the_command_line_counts_steps_and_refuses_a_negative_count(tmp_path, capsys):
    before = torch.get_num_threads()
    try:
        main(["tiny-target", "--family", "short_conv", "--steps", "2", "--out", str(tmp_path / "t")])
    finally:
        torch.set_num_threads(before)
    assert "after 2 steps" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["tiny-target", "--steps", "-1", "--out", str(tmp_path / "u")])
    assert "--steps" in capsys.readouterr().err
