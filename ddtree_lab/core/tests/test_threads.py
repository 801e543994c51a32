"""Threads that fit the machine (issue 58): one rule (``core.threads``) for the command line, the
notebooks (``lab.setup``) and the Python API (``load_target``); the CLI sets it before any
command runs, so before any timing; a count asked for wins. And the GDN kernel-fallback
warnings: silenced on a CPU run, with one line saying why, once."""
from __future__ import annotations

import logging

import pytest
import torch

from ddtree_lab.app import cli, lab
from ddtree_lab.core import models, threads
from ddtree_lab.core.models import build_target, kernel_notices


@pytest.fixture(autouse=True)
def nothing_asked_for(monkeypatch):
    """Each test starts as a fresh process does (conftest restores torch's count after it)."""
    monkeypatch.setattr(threads, "_chosen", [])


def test_the_rule_decodes_on_one_thread_and_trains_on_the_idle_cores(monkeypatch):
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.2, 0.0, 0.0))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 8)
    assert threads.rule_threads("decode") == 1 and threads.idle_cores() == threads.rule_threads("train") == 7
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    assert threads.idle_cores() == 1  # a busy machine: still one
    with pytest.raises(ValueError, match="work must be one of"):
        threads.rule_threads("bench")
    with pytest.raises(ValueError, match="threads must be an int >= 1, got 0"):
        threads.set_threads(0)


def test_load_target_applies_the_rule_unless_a_count_was_asked_for(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_TORCH_DEFAULT", 3)
    torch.set_num_threads(3)
    threads.apply_rule()
    assert torch.get_num_threads() == 1 and threads.asked_for()
    monkeypatch.setattr(threads, "_chosen", [])
    torch.set_num_threads(2)  # the user's torch.set_num_threads: kept
    threads.apply_rule()
    assert torch.get_num_threads() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(3)
    threads.apply_rule()  # OMP_NUM_THREADS: the user's choice, taken
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("argv,want", [(["bench", "--prompts", "1"], 1),
                                       (["train-drafter", "--arch", "gdn"], 3),
                                       (["--threads", "2", "sweep"], 2),
                                       (["sweep", "--threads", "2"], 2)])
def test_the_cli_sets_the_rule_before_the_command_runs(argv, want, monkeypatch):
    """Before any model loads or any timing starts: the command sees the rule's count."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "idle_cores", lambda: 3)
    seen = []
    monkeypatch.setattr(cli, "_run", lambda p, args: seen.append(torch.get_num_threads()))
    torch.set_num_threads(4)
    cli.main(argv)
    assert seen == [want]


def test_notebooks_follow_the_same_rule(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(3)
    lab.setup(seed=0)
    assert torch.get_num_threads() == 1
    lab.setup(seed=0, cpu_threads=2)
    assert torch.get_num_threads() == 2


@pytest.fixture
def transformers_warnings():
    """transformers' warnings on (its default), as in a user's script; its level restored after."""
    root = logging.getLogger("transformers")
    before = root.level
    root.setLevel(logging.WARNING)
    yield
    root.setLevel(before)


def test_the_kernel_fallback_warnings_are_silenced_on_a_cpu_once_with_a_reason(transformers_warnings, monkeypatch,
                                                                              capsys):
    """On a CPU: one line, once, and the warnings dropped; on another device they are kept."""
    log = logging.getLogger("transformers.integrations.hub_kernels")
    monkeypatch.setattr(log, "filters", [])
    gdn = build_target("gdn-toy")
    kernel_notices(gdn)
    kernel_notices(gdn)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "flash-linear-attention are not installed: all are GPU kernels" in err[0]
    record = logging.LogRecord(log.name, logging.WARNING, "", 0, f"`x` {models.KERNEL_FALLBACK} because", None, None)
    assert not log.filter(record)
    kernel_notices(gdn.to("meta"))  # a GPU's target (any device but the CPU): the warnings are kept
    assert log.filter(record)
    kernel_notices(build_target("mla-toy"))  # no GDN layer: nothing to say
    assert capsys.readouterr().err == "" and log.filter(record)
