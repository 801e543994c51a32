"""A calibrated surrogate for ``auto``'s choice between the chain and a tree (issue 69 item 6;
Platt scaling on the drafter's log path probability).

The calibration store (notebook 06, ``studies.calibration``) shows the drafter's q(u) is not
what the target accepts: a node on the top-1 path (the chain's nodes) is accepted far more often
than q(u), a node off it less often. So ``auto`` over-values trees and under-values the chain.
Per target and per group g (on the top-1 path or off it), a logistic fit
P(accepted) = sigmoid(b_g + a_g log q(u)) by maximum likelihood (Newton's method), on the store's
rows of prompts ``FIT_PROMPTS`` only: ``auto_chain`` measures on prompts 0-9, which the fit never
sees. Beside each fit its check on the held-out prompts 0-9 (summed accepted against summed
predicted, and the raw q's sum). Stored as ``data/results/auto_calibration.json``.

``auto`` reads it (``core.allocate.Calibration``, attached to the cost model of a pair the fit was
made on by ``plumbing.costs.acceptance_for``, matched by the pair's tag, stored beside the fits).
History (issue 69): while its cost model timed isolated verifies, ``auto`` weighed by this fit chose
the chain in 99-100% of rounds and was not faster than ``auto`` on q; with the cost model timed on
the loop's own rounds (the chain's round is cheaper there), it is measured again by ``auto_chain``.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ...common import RESULTS_DIR
from ...train.pair import load_pair
from ..plumbing.costs import CALIBRATION_JSON

STORE_GLOB, OUT_JSON = "calibration-*.csv.gz", CALIBRATION_JSON
FIT_PROMPTS = tuple(range(10, 19))  # the calibration store's prompts 10-18; auto_chain measures on 0-9
HELD_OUT = tuple(range(10))


def platt(log_q: np.ndarray, accepted: np.ndarray, iters: int = 100) -> tuple[float, float]:
    """(b, a) maximising the Bernoulli likelihood of ``accepted`` [n] under sigmoid(b + a log_q) [n]."""
    X = np.stack([np.ones_like(log_q), log_q], 1)  # [n, 2]
    w = np.zeros(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-X @ w))
        step = np.linalg.solve((X * (p * (1 - p))[:, None]).T @ X, X.T @ (accepted - p))
        w += step
        if np.abs(step).max() < 1e-12:
            break
    return float(w[0]), float(w[1])


def acceptance(b: float, a: float, log_q: np.ndarray) -> np.ndarray:
    """sigmoid(b + a log_q) [n]: the calibrated probability that the target accepts each node."""
    return 1 / (1 + np.exp(-(b + a * log_q)))


def fit(rows: pd.DataFrame) -> dict:
    """Per arch: the two groups' (b, a), fitted on FIT_PROMPTS, and the held-out check."""
    out = {}
    for arch, a in rows.groupby("arch", sort=True):
        train, test = a[a.prompt.isin(FIT_PROMPTS)], a[a.prompt.isin(HELD_OUT)]
        groups = {g: platt(np.log(t.q_path.to_numpy()), t.accepted.to_numpy(float))
                  for g, t in (("top1", train[train.main_path]), ("off", train[~train.main_path]))}
        check = {}
        for g, t in (("top1", test[test.main_path]), ("off", test[~test.main_path])):
            pred = acceptance(*groups[g], np.log(t.q_path.to_numpy()))
            check[g] = {"nodes": len(t), "accepted": int(t.accepted.sum()), "predicted": float(pred.sum()),
                        "q_sum": float(t.q_path.sum())}
        out[arch] = {**groups, "fit_rows": len(train), "held_out": check}
    return out


def load(directory=RESULTS_DIR) -> dict[str, dict]:
    """{arch: {"top1": (b, a), "off": (b, a)}} from the stored ``auto_calibration.json``."""
    stored = json.loads((directory / OUT_JSON).read_text())
    return {arch: {g: tuple(v[g]) for g in ("top1", "off")} for arch, v in stored["fits"].items()}


def study(smoke: bool = False) -> dict:
    """Fit on the calibration store and write ``auto_calibration.json`` (the registry's step; smoke:
    into data/results/smoke/)."""
    (store,) = sorted(RESULTS_DIR.glob(STORE_GLOB))
    fits = fit(pd.read_csv(store))
    models = {arch: load_pair(arch).tag for arch in fits}  # the shipped pairs the store measured
    result = {"source": store.name, "models": models, "fit_prompts": list(FIT_PROMPTS), "held_out_prompts": list(HELD_OUT),
              "form": "P(accepted) = sigmoid(b + a log q_path), (b, a) per group: top1 (the drafter's top-1 path), "
                      "off", "fits": fits}
    directory = RESULTS_DIR / "smoke" if smoke else RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    (directory / OUT_JSON).write_text(json.dumps(result, indent=1) + "\n")
    for arch, f in fits.items():
        print(arch, {g: [round(x, 3) for x in f[g]] for g in ("top1", "off")},
              {g: (c["accepted"], round(c["predicted"], 1), round(c["q_sum"], 1)) for g, c in f["held_out"].items()})
    return result


if __name__ == "__main__":
    study()
