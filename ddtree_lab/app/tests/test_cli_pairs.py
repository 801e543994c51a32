"""A pair from directories and prompts from a file, from the command line: the rows land in a
folder of their own (never in the shipped stores the README reads), keyed by the prompt set."""
import json

import pytest

from ddtree_lab.app import cli
from ddtree_lab.common import ROOT
from ddtree_lab.experiments.plumbing.results import ResultsStore

CKPT = ROOT / "data" / "checkpoints"


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in
                              enumerate(["def add(a, b):\n", "class Stack:\n    def push(self, x):\n"])) + "\n")
    return path


def test_sweep_on_a_directory_pair_and_a_prompt_file(tmp_path, prompts_file, monkeypatch):
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    cli.main(["sweep", "--target", str(CKPT / "mla-target"), "--drafter", str(CKPT / "mla-drafter"),
              "--prompts", str(prompts_file), "--field", "text", "--methods", "ar", "dflash",
              "--max-new-tokens", "6", "--store", "mine"])
    stores = list((tmp_path / "results" / "pairs").glob("*/mine.jsonl"))
    assert len(stores) == 1, stores
    rows = ResultsStore("mine", stores[0].parent).rows()
    assert sorted({r["prompt"] for r in rows}) == [0, 1] and {r["config"]["method"] for r in rows} == {"ar", "dflash"}
    assert all(r["models"]["prompts"].endswith(":text") for r in rows)
    ar = {r["prompt"]: r["metrics"]["tokens"] for r in rows if r["config"]["method"] == "ar"}
    assert all(r["metrics"]["tokens"] == ar[r["prompt"]] for r in rows)  # lossless on the file's prompts too


@pytest.mark.parametrize("args,message", [
    (["--target", str(CKPT / "mla-target")], "--target and --drafter go together"),
])
def test_bad_pair_arguments_say_what_is_wrong(args, message, capsys):
    with pytest.raises(SystemExit, match=message):
        cli.main(["sweep", *args, "--prompts", "1"])


def test_a_prompt_file_without_the_field_is_refused_before_any_work(tmp_path, prompts_file, monkeypatch):
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    with pytest.raises(SystemExit, match=r"mine.jsonl:1: field 'prompt' missing \(the line has \['id', 'text'\]\)"):
        cli.main(["bench", "--prompts", str(prompts_file)])
    assert not (tmp_path / "results").exists()
