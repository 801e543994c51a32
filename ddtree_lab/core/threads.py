"""The lab's one rule for torch's CPU threads: the command line, the notebooks and the Python
API all follow it, and every stored timing records the count it ran with (``stamp``).

    decoding and timing: one thread. The lab's models are tiny: one thread decodes them
        fastest, and a timing taken on one thread holds when another job shares the machine
        (issue 58: on a busy 2-core CPU, torch's default of one thread per core made AR
        decoding many times slower).
    training (the ``train-*`` commands): the cores not already busy, at least one
        (``idle_cores``: the core count less the 1-minute load average). ``tiny-target`` trains
        on one thread: counted in steps and seeded, it is then the same model on every machine
        of a kind, whatever its load.

A count asked for wins: ``--threads N`` (CLI), ``lab.setup(cpu_threads=N)`` (notebooks),
``set_threads(N)`` (Python), ``OMP_NUM_THREADS`` (all three), or ``torch.set_num_threads``
called before the first model loads. The CLI sets the count before any command runs;
``load_target`` (so ``load_pair`` too) applies the rule once when nothing was asked for.
"""
from __future__ import annotations

import os

import torch

WORK = ("decode", "train")
_TORCH_DEFAULT = torch.get_num_threads()  # what torch picked at import (a later change is the user's)
_chosen: list[int] = []                   # the count set through this module, once set


def idle_cores() -> int:
    """The cores not already busy: ``os.cpu_count()`` less the rounded 1-minute load average,
    at least 1."""
    return max(1, (os.cpu_count() or 1) - round(os.getloadavg()[0]))


def rule_threads(work: str = "decode") -> int:
    """The rule's count for ``work`` ("decode": decoding and timing, 1; "train": ``idle_cores``)."""
    if work not in WORK:
        raise ValueError(f"work must be one of {WORK}, got {work!r}")
    return 1 if work == "decode" else idle_cores()


def env_threads() -> int | None:
    """``OMP_NUM_THREADS`` when it is an int >= 1, else None."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) >= 1 else None


def set_threads(threads: int | None = None, work: str = "decode") -> int:
    """Set torch's CPU threads to ``threads`` (an int >= 1), else to ``OMP_NUM_THREADS``, else
    to the rule's count for ``work``; -> the count set."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")
    n = threads or env_threads() or rule_threads(work)
    torch.set_num_threads(n)
    _chosen[:] = [n]
    return n


def asked_for() -> bool:
    """Whether a thread count was already chosen: through ``set_threads``, or with
    ``torch.set_num_threads`` since the lab was imported."""
    return bool(_chosen) or torch.get_num_threads() != _TORCH_DEFAULT


def apply_rule() -> None:
    """The decoding rule (one thread), unless a count was asked for (``asked_for``): what
    ``load_target`` calls, so the Python API follows the same rule as the CLI."""
    if not asked_for():
        set_threads(None, "decode")
