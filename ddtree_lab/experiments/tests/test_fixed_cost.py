"""Issue 69 item 8: ``scripts/gpu_check.sh --dry`` runs the fixed-cost step on the CPU in seconds
(eager, 1- and 16-token forwards of the tiny MoE), and the step's forwards leave the cache at its
prefix (every repeat times the same forward)."""
import os
import subprocess

import pandas as pd
import pytest

from ddtree_lab.common import ROOT
from ddtree_lab.core.models import build_target
from ddtree_lab.experiments.studies import fixed_cost as fc


@pytest.mark.slow  # runs scripts/gpu_check.sh --dry whole (seconds of subprocesses)
def test_gpu_check_dry_writes_the_fixed_cost(tmp_path):
    env = os.environ | {"GPU_CHECK_OUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry"], check=True, env=env, timeout=300)
    t = pd.read_csv(tmp_path / "fixed_cost.csv")
    assert sorted(t.tokens) == [1, 16] and set(t["mode"]) == {"eager"} and (t.ms > 0).all()
    assert set(t.device) == {"cpu"} and (t.repeats == 3).all()


def test_a_timed_forward_leaves_the_cache_at_its_prefix():
    model = build_target(fc.PRESET).eval()
    run = fc.forward_fn(model, 16, "cpu")
    cache = run.__closure__[[c.cell_contents.__class__.__name__ for c in run.__closure__].index("DynamicCache")].cell_contents
    for _ in range(3):
        run()
        assert cache.get_seq_length() == fc.PREFIX
