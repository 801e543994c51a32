"""Errors a command-line user can act on (issue 58), from ``cli.main`` in-process:

- a bad argument exits with status 2 and argparse's line naming the option, the value and the
  allowed range (budgets, block sizes, a missing prompts file, a target's directory as --drafter);
- a ``ValueError`` of the library (a refused target, a drafter of another target) is one line
  ``ddtree-lab CMD: error: ...`` and status 2, no traceback, before any row is written;
- a path that is no checkpoint directory is refused as argparse reads it, naming the command and
  the option, before torch loads;
- advice in an error is a command that runs: the advised ``train-drafter`` parses and reaches
  training;
- Ctrl-C in a resumable command says how many rows its store keeps, where, and exits 130;
- ``--threads`` is in every command's help;
- ``--help``, ``--version`` and a bad argument answer before torch, transformers or pandas load.
Every error comes before a model loads, or after a tiny one: the file runs in seconds."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from ddtree_lab.app import cli
from ddtree_lab.common import ROOT
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.spec import MAX_BUDGET
from ddtree_lab.train.checkpoints import write_manifest

CKPT = ROOT / "data" / "checkpoints"
SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
             intermediate_size=64, vocab_size=64, max_position_embeddings=256)


def exit_code_and_error(argv, capsys) -> tuple[int, list[str]]:
    """(exit status, stderr lines) of ``cli.main(argv)``, which must exit."""
    capsys.readouterr()  # what the test printed before (save_pretrained's progress bar)
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    return err.value.code, capsys.readouterr().err.strip().splitlines()


def saved_target(path, model_type: str = "qwen3", **extra):
    """A random tiny causal LM saved with ``save_pretrained`` into ``path``."""
    cfg = AutoConfig.for_model(model_type, **SHAPE, **extra)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(path)
    return model


BAD_ARGUMENTS = [
    (["sweep", "--budgets", "abc"], "argument --budgets: must be an int in [1, 1024] or 'auto', got 'abc'"),
    (["sweep", "--budgets", "4", "0"], "argument --budgets: must be an int in [1, 1024] or 'auto', got '0'"),
    (["sweep", "--budgets", "2048"], "argument --budgets: must be an int in [1, 1024] or 'auto', got '2048'"),
    (["sweep", "--block-sizes", "0"], "argument --block-sizes: must be an int >= 2, got '0'"),
    (["sweep", "--temperatures", "-1"], "argument --temperatures: must be a finite float >= 0 (0: greedy), got '-1'"),
    (["bench", "--max-new-tokens", "0"], "argument --max-new-tokens: must be an int >= 1, got '0'"),
    (["concurrency", "--budgets", "0"], "argument --budgets: must be an int in [1, 1024], got '0'"),
    (["--threads", "0", "bench"], "argument --threads: must be an int >= 1, got '0'"),
    (["bench", "--prompts", "0"], "argument --prompts: must be an int >= 1 or a .jsonl file, got '0'"),
    (["bench", "--prompts", "no/such/prompts.jsonl"],
     "argument --prompts: no such file: no/such/prompts.jsonl (give an int >= 1 or a .jsonl file of prompts)"),
    (["unlikelihood", "--arch", "gdn", "--alpha", "-0.5"],
     "argument --alpha: must be a finite float >= 0 (0: MLE alone), got '-0.5'"),
    (["unlikelihood", "--arch", "gdn", "--steps", "0"], "argument --steps: must be an int >= 1, got 0"),
    (["unlikelihood", "--arch", "gdn", "--lr", "0"], "argument --lr: must be a finite float > 0, got '0'"),
]


@pytest.mark.parametrize("argv,line", BAD_ARGUMENTS, ids=[" ".join(argv) for argv, _ in BAD_ARGUMENTS])
def test_a_bad_argument_names_the_option_the_value_and_the_range(argv, line, capsys):
    code, err = exit_code_and_error(argv, capsys)
    assert code == 2 and err[-1].endswith(f"error: {line}"), err


BAD_PATHS = [
    (["bench", "--target", "/tmp", "--drafter", str(CKPT / "gdn-drafter")],
     "ddtree-lab bench: error: argument --target: /tmp must be a checkpoint directory with config.json"),
    (["sweep", "--target", "no/such/dir"],
     "ddtree-lab sweep: error: argument --target: no/such/dir must be a checkpoint directory with config.json "
     "(no such directory)"),
    (["train-drafter", "--target", "/tmp", "--out", "x"],
     "ddtree-lab train-drafter: error: argument --target: /tmp must be a checkpoint directory with config.json"),
    (["bench", "--target", str(CKPT / "gdn-target"), "--drafter", "/tmp"],
     "ddtree-lab bench: error: argument --drafter: /tmp must be a DFlash drafter directory with config.json"),
    (["dflash2", "--drafter2", "no/such/dir"], "ddtree-lab dflash2: error: argument --drafter2: no/such/dir must "
                                               "be a DFlash drafter directory with config.json (no such directory)"),
    (["quality", "--tokenizer", "no/such/tokenizer.json"],
     "ddtree-lab quality: error: argument --tokenizer: no/such/tokenizer.json must be a directory of tokenizer "
     "files or a tokenizer.json file (no such file or directory)"),
]


@pytest.mark.parametrize("argv,line", BAD_PATHS, ids=[" ".join(argv[:3]) for argv, _ in BAD_PATHS])
def test_a_bad_path_names_the_command_and_the_option(argv, line, capsys):
    code, err = exit_code_and_error(argv, capsys)
    assert code == 2 and err[-1] == line, err


def test_the_cli_answers_before_torch_loads():
    """--help, --version, a bad argument and a bad path (a target, a target's directory as
    --drafter) answer without importing torch, transformers or pandas (seconds): the commands'
    imports load only once argparse has accepted a command."""
    code = ("import sys\nfrom ddtree_lab.app import cli\n"
            "for argv in (['--help'], ['--version'], ['sweep', '--budgets', '0'], ['show', 'no-such'],\n"
            "             ['bench', '--target', '/tmp'], ['bench', '--drafter', 'data/checkpoints/gdn-target']):\n"
            "    try:\n        cli.main(argv)\n    except SystemExit as e:\n        print('exit', e.code)\n"
            "print(sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    lines = out.stdout.splitlines()
    assert [line for line in lines if line.startswith("exit ")] == ["exit 0", "exit 0"] + ["exit 2"] * 4, out
    assert lines[-1] == "[]", out   # no torch, transformers or pandas
    assert re.search(r"^ddtree-lab (\d|\(not installed\))", out.stdout, re.M) and "argument --budgets" in out.stderr
    assert cli.MAX_BUDGET == MAX_BUDGET   # its copy, checked before core.spec loads


def test_a_targets_directory_is_no_drafter(capsys):
    target = CKPT / "mla-target"
    code, err = exit_code_and_error(["bench", "--target", str(target), "--drafter", str(target)], capsys)
    assert code == 2 and re.search(r"error: argument --drafter: .*mla-target holds a DeepseekV3ForCausalLM "
                                   r"checkpoint, not a DFlash drafter", err[-1]), err
    assert "train-drafter --target" in err[-1]


@pytest.mark.parametrize("command", ["bench", "sweep", "train-drafter"])
def test_a_refused_target_is_one_line_before_any_work(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    target = tmp_path / "mistral"
    saved_target(target, "mistral", sliding_window=64)
    other = (["--out", str(tmp_path / "drafter")] if command == "train-drafter" else
             ["--drafter", str(CKPT / "gdn-drafter"), "--prompts", "1"])
    code, err = exit_code_and_error([command, "--target", str(target), *other], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"ddtree-lab {command}: error: MistralForCausalLM: sliding_window=64 is smaller than "
                             "max_position_embeddings=256")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mistral"]  # no results, no drafter, no run state


def test_a_drafter_of_another_target_advises_a_command_that_runs(tmp_path, monkeypatch, capsys):
    """The advice of an attention-only target with another target's drafter is `train-drafter
    --target T --out DIR --tokenizer TOK` (the tokenizer the failed command was given); that
    command parses, loads the target and its tokenizer and reaches training."""
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    target = saved_target(tmp_path / "target")
    drafter_dir = tmp_path / "drafter"
    cfg = DrafterConfig.for_target(target, mask_token_id=SHAPE["vocab_size"] - 1, num_layers=1, block_size=4)
    DFlashDrafter.from_config(cfg, target).model.save_pretrained(drafter_dir)
    write_manifest(drafter_dir, target_sha256="0" * 64)  # trained for another target
    tokenizer = str(ROOT / "data" / "tokenizer.json")  # the target directory holds none
    code, err = exit_code_and_error(["bench", "--target", str(tmp_path / "target"), "--drafter", str(drafter_dir),
                                     "--tokenizer", tokenizer, "--prompts", "1"], capsys)
    # the last line (transformers' weight-loading bars come before it), and no traceback
    assert code == 2 and err[-1].startswith("ddtree-lab bench: error: ") and "Traceback" not in "".join(err), err
    assert "was trained for another target" in err[-1]
    advice = shlex.split(re.search(r"with `([^`]+)`", err[-1]).group(1))
    assert advice[:2] == ["ddtree-lab", "train-drafter"] and "--arch" not in advice
    assert advice[advice.index("--tokenizer") + 1] == tokenizer
    calls = []
    monkeypatch.setattr(cli, "train_drafter", lambda *a, **kw: calls.append((a, kw)) or {})
    cli.main(advice[1:])
    (arch, preset), kwargs = calls[0]
    assert arch is None and preset == "default" and kwargs["target"].config.model_type == "qwen3"
    assert kwargs["tok"].get_vocab_size() == 4096
    assert str(kwargs["out"]) == advice[advice.index("--out") + 1] and str(kwargs["out"]) != str(drafter_dir)


def _interrupting(rows: int):
    """A stand-in for a command's runner: appends ``rows`` rows to the store it was given (a
    ``store``, or ``directory`` and the runner's store name), then Ctrl-C."""
    def run(*args, **kwargs):
        store = next((a for a in (*args, *kwargs.values()) if hasattr(a, "path")), None)
        path = store.path if store is not None else kwargs["directory"] / f"{run.name}.jsonl"
        path.write_text("".join(json.dumps({"key": str(i)}) + "\n" for i in range(rows)))
        raise KeyboardInterrupt
    return run


@pytest.mark.parametrize("command,runner,name", [
    ("bench", "run_bench", "bench"), ("quality", "run_quality", "quality"), ("sweep", "run_sweep", "sweeps"),
    ("concurrency", "run_concurrency", "concurrency")])
def test_ctrl_c_says_what_the_store_keeps(command, runner, name, tmp_path, monkeypatch, capsys):
    pair = SimpleNamespace(drafter=SimpleNamespace(cfg=SimpleNamespace(block_size=16)))
    monkeypatch.setattr(cli, "_chosen_pairs", lambda args, archs: ({"gdn": pair}, [0, 1], tmp_path))
    stop = _interrupting(3)
    stop.name = name
    monkeypatch.setattr(cli.conc if runner == "run_concurrency" else cli, runner, stop)
    code, err = exit_code_and_error([command, "--prompts", "2"], capsys)
    assert code == 130 and err == [f"interrupted: 3 rows kept in {tmp_path / (name + '.jsonl')}; rerun to resume"]


def test_every_command_documents_threads(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    commands = re.search(r"\{([a-z0-9,-]+)\}", capsys.readouterr().out).group(1).split(",")
    assert {"bench", "sweep", "train-drafter"} <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit) as err:
            cli.main([command, "--help"])
        assert err.value.code == 0 and "--threads THREADS" in capsys.readouterr().out, command
