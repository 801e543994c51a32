"""A round in a few files (issue 65 item 3): profiled, one DDTree generation on each shipped
target runs code in at most 7 package files (GDN) / 6 (MLA), and an MLA generation runs no
recurrent-layer code (nothing under ``core/families``)."""
import collections
import os
import sys

import pytest
import torch

import ddtree_lab
from ddtree_lab.core.decode import generate
from ddtree_lab.train.pair import load_pair

PACKAGE = os.path.dirname(ddtree_lab.__file__)
MOST_FILES = {"gdn": 7, "mla": 6}


def files_run(fn) -> dict[str, int]:
    """{package file (relative): calls into it} while ``fn()`` runs (``sys.setprofile``)."""
    calls = collections.Counter()

    def profile(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(PACKAGE) and f"{os.sep}tests{os.sep}" not in name:
            calls[os.path.relpath(name, PACKAGE)] += 1
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return dict(calls)


@pytest.mark.parametrize("arch", ["gdn", "mla"])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_a_ddtree_generation_runs_in_a_few_files(arch, temperature):
    pair = load_pair(arch)
    prompt = torch.tensor([1, 5, 9, 22, 40, 7, 3, 11])
    kwargs = dict(method="ddtree", budget=16, max_new_tokens=16, temperature=temperature, seed=1)
    generate(pair.target, pair.drafter, prompt, **kwargs)  # first use: routes and caches made once per model
    files = files_run(lambda: generate(pair.target, pair.drafter, prompt, **kwargs))
    print(f"{arch} T={temperature}: {len(files)} files: {sorted(files)}")
    assert len(files) <= MOST_FILES[arch]
    assert {"core/decode.py", "core/verify.py", "core/tree.py", "core/drafter.py"} <= set(files)
    recurrent = [f for f in files if f.startswith("core/families/")]
    assert (recurrent == ["core/families/gdn/wy.py"]) if arch == "gdn" else not recurrent
