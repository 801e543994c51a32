"""Shared test setup for every test of the repository (beside its module, ``ddtree_lab/<layer>/tests/``,
or of the project, ``tests/``): tiny models on one CPU thread (small ops run fastest, and the suite
never oversubscribes a machine that is also training). The shared helpers and factories live
in ``tests/helpers.py`` (on the path: pyproject's pytest ``pythonpath``); tests import them from there (never from conftest or another test file).

``threads``: a test that claims bit-identity takes this fixture and runs once with 1 and once
with 2 torch threads (another thread count splits reductions differently; a claim of
bit-identity must survive it)."""
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _threads_restored():
    """Every test leaves torch's thread count as it found it (a CLI call inside a test sets the lab's
    rule, ``core.threads``: a train-* command takes the idle cores)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=[1, 2], ids=lambda n: f"threads{n}")
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)
