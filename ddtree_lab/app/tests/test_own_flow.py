"""The own-model flow from the command line (issue 58), the parts that run in seconds: a target
without a tokenizer is refused before any work; every command ends with one line saying what
it wrote and where; ``bench`` on a pair of one's own prints no PASS / MISS against the shipped
pairs' goals, and its table holds at most 10 columns (``--wide``: every one) with matches_ar at
T = 0 only; the ``sweep`` table holds this command's rows and says what else the store keeps; an
interrupted sweep and its rerun count this run's rows; a long run prints an estimate once its
first prompt is done; every command that takes --target refuses one without tokenizer files.
(The walk-through itself, end to end: ``test_walkthrough.py``, slow.)"""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from ddtree_lab.app import cli
from ddtree_lab.experiments.plumbing.results import ResultsStore
from ddtree_lab.experiments.plumbing.sweep import expand_grid, grid_rows, run_sweep
from ddtree_lab.experiments.studies import bench
from ddtree_lab.train.checkpoints import ckpt_path


def saved_target(path) -> None:
    """A random tiny Qwen3 saved with ``save_pretrained`` alone: no tokenizer files."""
    torch.manual_seed(0)
    Qwen3ForCausalLM(Qwen3Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                 head_dim=16, intermediate_size=64, vocab_size=64)).save_pretrained(path)


def exit_code_and_error(argv, capsys) -> tuple[int, list[str]]:
    """(exit status, stderr lines) of ``cli.main(argv)``, which must exit."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    return err.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("command", ["bench", "train-drafter"])
def test_a_target_without_a_tokenizer_is_refused_before_any_work(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    saved_target(tmp_path / "target")
    other = ["--out", str(tmp_path / "drafter")] if command == "train-drafter" else \
        ["--drafter", str(ckpt_path("gdn", "drafter")), "--prompts", "1"]
    code, err = exit_code_and_error([command, "--target", str(tmp_path / "target"), *other], capsys)
    assert code == 2 and "target holds no tokenizer (tokenizer.json or tokenizer_config.json): pass --tokenizer DIR" \
        in err[-1], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # no results, no drafter, no run state


EVERY_TARGET_COMMAND = {   # each command that takes --target, with the other options it needs
    "bench": ["--drafter", "DRAFTER", "--prompts", "1"], "sweep": ["--drafter", "DRAFTER", "--prompts", "1"],
    "quality": ["--drafter", "DRAFTER", "--prompts", "1"], "concurrency": ["--drafter", "DRAFTER", "--prompts", "1"],
    "compare-drafters": ["--drafter", "DRAFTER", "--prompts", "1"],
    "dflash2": ["--drafter", "DRAFTER", "--drafter2", "DRAFTER2", "--prompts", "1"],
    "train-drafter": ["--out", "OUT"], "train-drafter2": ["--drafter", "DRAFTER", "--out", "OUT"]}


@pytest.mark.parametrize("command", sorted(EVERY_TARGET_COMMAND))
def test_a_copy_of_the_shipped_target_without_its_tokenizer_is_refused_by_every_command(command, tmp_path,
                                                                                         monkeypatch, capsys):
    """One tokenizer rule, no exception (issue 66): every command that takes --target refuses a
    directory without tokenizer files, even the shipped target's copy (a lab manifest), in one
    line naming the command, before any work."""
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    copy = tmp_path / "target"
    shutil.copytree(ckpt_path("gdn", "target"), copy)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).unlink()
    paths = {"DRAFTER": str(ckpt_path("gdn", "drafter")), "DRAFTER2": str(ckpt_path("gdn", "drafter2")),
             "OUT": str(tmp_path / "out")}
    other = [paths.get(a, a) for a in EVERY_TARGET_COMMAND[command]]
    code, err = exit_code_and_error([command, "--target", str(copy), *other], capsys)
    assert code == 2 and err[-1].startswith(f"ddtree-lab {command}: error: {copy} holds no tokenizer"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # no results, no drafter, no run state


class FakePair:
    def __init__(self, arch):
        self.arch, self.tag = arch, f"{arch}-0-0"
        self.digests = {"target": "t", "drafter": "d"}
        self.drafter = SimpleNamespace(cfg=SimpleNamespace(block_size=16))


def fake_runner(cfg, prompt, pair):
    return {"tokens": [1, 2, 3], "tau": 1.5, "tokens_per_s": 10.0, "timings": {"total": 0.3},
            "acceptance_lengths": [2, 1], "tree_sizes": [4, 4]}


def test_the_sweep_table_holds_this_commands_rows(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_chosen_pairs", lambda args, archs: ({"attention": FakePair("attention")}, [0],
                                                                   tmp_path))
    monkeypatch.setattr(cli, "run_with_official", fake_runner)
    cli.main(["sweep", "--budgets", "4", "--prompts", "1"])
    cli.main(["sweep", "--budgets", "16", "--prompts", "1"])
    out = capsys.readouterr().out.splitlines()
    table = [line.split() for line in out if line.startswith("attention")]
    assert [row[1] for row in table[-3:]] == ["ar", "dflash", "ddtree"] and table[-1][3] == "16"
    assert out[-2] == ("(the table holds this command's 3 rows; the store keeps 1 more of earlier sweeps of this "
                       "pair, left out)")
    assert out[-1] == f"wrote the sweep rows to {tmp_path / 'sweeps.jsonl'}"


def test_an_interrupted_sweep_counts_its_own_rows_and_the_rerun_says_what_is_left(tmp_path, monkeypatch, capsys):
    """Ctrl-C in the third of this sweep's 6 rows, in a store that keeps rows of an earlier sweep:
    the line counts this run's rows (2 stored, 4 to run), not the store's; the rerun says so
    before it runs the 4."""
    monkeypatch.setattr(cli, "_chosen_pairs", lambda args, archs: ({"attention": FakePair("attention")}, [0, 1],
                                                                   tmp_path))
    monkeypatch.setattr(cli, "run_with_official", fake_runner)
    cli.main(["sweep", "--methods", "ddtree", "--budgets", "4", "--prompts", "1"])   # an earlier sweep's rows
    earlier, calls = len(ResultsStore("sweeps", tmp_path).rows()), []

    def stop_at_the_third(cfg, prompt, pair):
        calls.append(prompt)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return fake_runner(cfg, prompt, pair)
    monkeypatch.setattr(cli, "run_with_official", stop_at_the_third)
    capsys.readouterr()
    code, err = exit_code_and_error(["sweep", "--budgets", "16", "--prompts", "2"], capsys)
    assert code == 130 and err[-1] == (f"interrupted: 2 of this run's rows already stored, 4 to run (in "
                                       f"{tmp_path / 'sweeps.jsonl'}); rerun the same command to resume"), err
    monkeypatch.setattr(cli, "run_with_official", fake_runner)
    cli.main(["sweep", "--budgets", "16", "--prompts", "2"])
    out = capsys.readouterr()
    assert "2 of this run's rows already stored, 4 to run" in out.out
    assert len(ResultsStore("sweeps", tmp_path).rows()) == earlier + 6


def test_grid_rows_keeps_the_configs_and_prompts_asked_for(tmp_path):
    pairs = {"gdn": FakePair("gdn")}
    store = ResultsStore("s", tmp_path)
    grid = lambda b: expand_grid(arch=["gdn"], method=["ddtree"], gdn_mode=["wy"], budget=b, block_size=[8],  # noqa
                                 temperature=[0.0, 0.5], max_new_tokens=[8], accept_rule=["rejection", "target"])
    run_sweep(grid([4, "auto"]), [0, 1], store, pairs, progress=False, runner=fake_runner)
    frame = run_sweep(grid([16]), [0], store, pairs, progress=False, runner=fake_runner)
    mine = grid_rows(frame, grid([16]), [0])
    assert len(frame) == 6 * 2 + 3 and len(mine) == 3 and set(mine.budget) == {16}
    assert sorted(grid_rows(frame, grid(["auto"]), [1]).accept_rule) == ["rejection", "rejection", "target"]


def test_a_long_run_estimates_the_rest_after_its_first_prompt(tmp_path, capsys):
    grid = expand_grid(arch=["gdn"], method=["ar", "ddtree"], gdn_mode=["wy"], budget=[4], block_size=[8],
                       temperature=[0.0], max_new_tokens=[8])
    run_sweep(grid, [0, 1, 2], ResultsStore("s", tmp_path), {"gdn": FakePair("gdn")}, runner=fake_runner)
    lines = [line for line in capsys.readouterr().out.splitlines() if "at this pace" in line]
    assert len(lines) == 1 and " 2 of 6 rows in " in lines[0], lines


@pytest.mark.parametrize("own", [True, False], ids=["own pair", "shipped pairs"])
def test_bench_scores_goals_on_the_shipped_pairs_only(own, tmp_path, monkeypatch, capsys):
    arch = "attention" if own else "gdn"
    monkeypatch.setattr(cli, "_chosen_pairs", lambda args, archs: ({arch: FakePair(arch)}, [0], tmp_path))
    calls = []
    monkeypatch.setattr(cli, "run_bench", lambda pairs, **kw: calls.append(kw))
    own_pair = ["--target", str(ckpt_path("gdn", "target")), "--drafter", str(ckpt_path("gdn", "drafter"))]
    cli.main(["bench", "--prompts", "1", *(own_pair if own else [])])
    out = capsys.readouterr().out.splitlines()
    assert calls[0]["score_goals"] is not own
    assert out[0].startswith(f"bench: {len(bench.bench_grid((arch,)))} configs x 1 prompt into ")
    assert out[-1] == f"wrote the bench rows to {tmp_path / 'bench.jsonl'} and its table to {tmp_path / 'bench.csv'}"


def test_the_bench_table_shows_ten_columns_and_every_one_when_wide(monkeypatch, tmp_path, capsys):
    table = pd.DataFrame([{"arch": "attention", "temperature": t, "accept_rule": rule, "method": "dflash",
                           "gdn_mode": "wy", "budget": 7, "block_size": 8, "max_new_tokens": 8, "tau": 2.0,
                           "tokens_per_s": 10.0, "speedup": 1.0, "speedup_paired": 1.5, "speedup_paired_lo": 1.2,
                           "speedup_paired_hi": 1.8, "matches_ar": 0.5 if t == 0 else 0.0, "tree_share": 0.1,
                           "n_prompts": 1}
                          for t, rule in ((0.0, "rejection"), (0.3, "rejection"), (0.3, "target"))])
    monkeypatch.setattr(bench, "run_sweep", lambda *a, **kw: pd.DataFrame({"prompt": [0]}))
    monkeypatch.setattr(bench, "bench_table", lambda frame: table)
    monkeypatch.setattr(bench, "copy_table", lambda t: pd.DataFrame())  # its own table, printed after this one
    monkeypatch.setattr(bench, "goals", lambda t: ["PASS  a goal of the shipped pairs"])
    bench.run_bench({"attention": FakePair("attention")}, num_prompts=1, directory=tmp_path, score_goals=False)
    out = capsys.readouterr().out.splitlines()
    header, rows = out[0].split(), out[1:4]
    assert header == ["arch", "temperature", "accept_rule", "method", "gdn_mode", "budget", "tau", "tokens_per_s",
                      "speedup_paired", "matches_ar"] and len(header) <= 10
    assert rows[0].split()[-1] == "0.50"   # T = 0: matches_ar; T > 0: blank, after the speedup's interval
    assert all(r.rstrip().endswith("1.50x [1.20, 1.80]") for r in rows[1:])
    assert "block_size: 8" in out and "max_new_tokens: 8" in out and bench.MATCHES_AR_NOTE in out
    assert not any(line.startswith(("PASS", "MISS")) for line in out)
    bench.run_bench({"attention": FakePair("attention")}, num_prompts=1, directory=tmp_path, wide=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [c for c in bench.WIDE_COLUMNS if c in table]  # the config's eight first
    assert out[2].split()[-4:] == ["1.2", "1.8", "0.1", "1"] and "PASS  a goal of the shipped pairs" in out


def test_train_drafter_ends_with_what_it_wrote_and_where_its_run_state_stays(tmp_path, monkeypatch, capsys):
    manifest = {"final_val_loss": 2.5, "tau_block16": 3.25, "tau_block8": 2.75, "threads": 1,
                "train_state": {"step": 150, "elapsed_s": 63.0}}
    monkeypatch.setattr(cli, "load_target", lambda *a, **kw: None)
    monkeypatch.setattr(cli, "load_tokenizer_for", lambda *a: None)
    monkeypatch.setattr(cli, "train_drafter", lambda *a, **kw: manifest)
    out = tmp_path / "my-drafter"
    cli.main(["train-drafter", "--target", str(ckpt_path("gdn", "target")), "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == ("drafter: held-out loss 2.500, tau 3.25 at block 16, tau 2.75 at block 8, 150 steps in 63 s "
                         "on 1 thread(s)")
    assert lines[-1].startswith(f"wrote the drafter to {out}; its training state stays in {out}.run (a rerun")
