"""The calibrated surrogate of issue 69 item 6 (``studies.auto_calibration``): the fit recovers
known parameters, the stored fits are the calibration store's fit on prompts auto_chain never
measures, and the stored held-out check is that fit's prediction."""
import json

import numpy as np
import pandas as pd
import pytest

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.studies import auto_calibration as ac


def test_platt_recovers_the_parameters_it_was_drawn_from():
    rng = np.random.default_rng(0)
    log_q = np.log(rng.uniform(1e-3, 1, 200_000))
    accepted = (rng.uniform(size=log_q.size) < 1 / (1 + np.exp(-(1.5 + 0.7 * log_q)))).astype(float)
    b, a = ac.platt(log_q, accepted)
    assert abs(b - 1.5) < 0.05 and abs(a - 0.7) < 0.02


def test_the_stored_fits_are_the_stores_fit_on_prompts_auto_chain_never_measures():
    stored = json.loads((RESULTS_DIR / ac.OUT_JSON).read_text())
    assert not set(stored["fit_prompts"]) & set(stored["held_out_prompts"])
    assert set(stored["held_out_prompts"]) >= set(range(10))  # auto_chain's prompts 0-9
    refit = ac.fit(pd.read_csv(RESULTS_DIR / stored["source"]))
    for arch, f in stored["fits"].items():
        for g in ("top1", "off"):
            assert refit[arch][g] == pytest.approx(f[g], rel=1e-6, abs=1e-9)
    acc = ac.load()
    assert set(acc) == {"gdn", "mla"} and all(a["top1"][1] > 0 and a["off"][1] > 0 for a in acc.values())


def test_the_held_out_check_is_the_fits_prediction_on_prompts_0_to_9():
    stored = json.loads((RESULTS_DIR / ac.OUT_JSON).read_text())
    rows = pd.read_csv(RESULTS_DIR / stored["source"])
    for arch, f in stored["fits"].items():
        test = rows[(rows.arch == arch) & rows.prompt.isin(stored["held_out_prompts"])]
        for g, t in (("top1", test[test.main_path]), ("off", test[~test.main_path])):
            want = ac.acceptance(*f[g], np.log(t.q_path.to_numpy())).sum()
            assert f["held_out"][g]["predicted"] == pytest.approx(want, rel=1e-9)
            assert f["held_out"][g]["accepted"] == int(t.accepted.sum())
