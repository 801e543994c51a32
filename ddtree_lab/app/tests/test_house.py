"""The house's commands over the registry: recompute replaces only the named experiment's
files and keeps the old ones until it succeeded; show and status read the stores."""
import pandas as pd
import pytest

from ddtree_lab.app.cli import main
from ddtree_lab.app import house
from ddtree_lab.experiments.plumbing.results import ResultsStore, write_timing_table
from ddtree_lab.app.registry import Experiment, Step

E = Experiment("toy", "a toy", stores=("toy",), tables=("toy.csv", "toy_t-*.csv.gz"), run=(Step("ddtree_lab.app.tests.test_house:_stored"),))


def _stored(folder):
    ResultsStore("toy", folder).add({"arch": "gdn"}, 0, {"tokens": [1]}, {"target": "t", "drafter": "d"})
    write_timing_table(pd.DataFrame({"ms": [1.0]}), folder / "toy.csv")
    (folder / "toy_t-abc.csv.gz").write_bytes(b"")
    (folder / "other.jsonl").write_text("{}\n")


def test_recompute_replaces_only_its_files_and_drops_the_backup_when_done(tmp_path):
    _stored(tmp_path)
    seen = []
    def runner(step):
        seen.append(sorted(p.name for p in tmp_path.iterdir() if p.is_file()))
        (tmp_path / "toy.jsonl").write_text("{}\n")
    backup = house.recompute(E, tmp_path, runner)
    assert seen == [["other.jsonl"]]  # the old files were aside while it ran; the other store untouched
    assert not backup.exists() and (tmp_path / "other.jsonl").is_file() and (tmp_path / "toy.jsonl").is_file()


def test_an_interrupted_recompute_keeps_the_old_files_and_resumes(tmp_path):
    _stored(tmp_path)
    def fails(step):
        (tmp_path / "toy.jsonl").write_text('{"half": 1}\n')
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        house.recompute(E, tmp_path, fails)
    backup = tmp_path / "recompute-backup" / "toy"
    assert sorted(p.name for p in backup.iterdir()) == ["toy.csv", "toy.jsonl", "toy_t-abc.csv.gz"]
    seen = []
    house.recompute(E, tmp_path, lambda step: seen.append((tmp_path / "toy.jsonl").read_text()))
    assert seen == ['{"half": 1}\n']  # the rerun resumed the half-done store, the backup was not overwritten
    assert not backup.exists()


def test_show_tables_the_store_and_prints_the_stamp(tmp_path):
    _stored(tmp_path)
    text = house.show(Experiment("toy", "a toy", tables=("toy.csv",)), tmp_path)
    assert "toy.csv (1 rows)" in text and "measured at " in text and "threads" in text


def test_status_names_every_experiment_without_running_the_golden_sample(capsys):
    main(["status", "--no-golden"])
    out = capsys.readouterr().out
    assert "quality" in out and "not checked" in out and "not sampled" in out


def test_an_unknown_experiment_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["recompute", "nope"])
    assert e.value.code == 2 and "no experiment 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["recompute"])
    assert e.value.code == 2


def test_a_command_step_runs_the_subcommand_handler_as_the_command_line_does(monkeypatch):
    """``cli.command`` (the registry's steps) hands the handler what argparse hands it for the
    same options, in this process; an unknown option is refused by name."""
    from ddtree_lab.app import cli
    seen = []
    monkeypatch.setattr(cli, "_cmd_sweep", seen.append)
    cli.command("sweep", budgets=[4], prompts=2)
    parsed = cli.parser().parse_args(["sweep", "--budgets", "4", "--prompts", "2"])
    assert {k: v for k, v in vars(seen[0]).items() if k != "threads"} == {k: v for k, v in vars(parsed).items()
                                                                       if k != "threads"}
    with pytest.raises(ValueError, match="sweep has no option \\['budget'\\]"):
        cli.command("sweep", budget=4)
