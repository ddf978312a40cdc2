"""Three ways to temperature-scale a deep ensemble on MNIST, on temperature_scaling.py's protocol
(MLP 784-200-10, 5 members, 3,000 Adam steps of 128 on the first 10,000 training images,
calibration on the next 5,000, ECE/NLL on the 10,000 test images), for seeds 0, 1, 2:

- per draw (bnnpp's ``Posterior.calibrate``): every member's log-probabilities divided by one T
  fitted by the NLL of the averaged predictive;
- pooled (Rahaman & Thiery 2021): the averaged predictive's log-probabilities divided by T;
- ETS (Zhang, Kailkhura & Han 2020, "Mix-n-Match", eq. 8): w1 · per-draw scaled + w2 · unscaled
  + w3 · uniform, the weights fitted by NLL on the calibration split.

    python benchmarks/studies/ensemble_scaling.py      # writes studies/results/ensemble_scaling.md
"""

from __future__ import annotations

import os
import sys

import numpy as np
from scipy.optimize import minimize, minimize_scalar

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import default_data_dir  # noqa: E402


def softmax_t(logp, t):
    z = logp / t
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def main() -> int:
    import bnnpp
    from bnnpp import metrics
    from bnnpp.calibrate import fit_temperature, scale_probs
    from bnnpp.evaluation import predict_probs

    d = bnnpp.data.load("mnist", default_data_dir(), validation=0, flatten=True)
    xf, yf = d.x_train[:10000], d.y_train[:10000]
    xc, yc = d.x_train[10000:15000], d.y_train[10000:15000]
    lines = ["# Temperature scaling of a 5-member ensemble on MNIST: per draw, pooled, ETS", "",
             "`python benchmarks/studies/ensemble_scaling.py` (protocol in its docstring; ECE with 15 bins).", "",
             "| seed | ECE raw | per draw: T, ECE, NLL | pooled: T, ECE, NLL | ETS: weights, ECE, NLL |", "|---|---|---|---|---|"]
    for seed in (0, 1, 2):
        model = bnnpp.models.mlp((200,), activation="relu", num_classes=10, prior=bnnpp.priors.normal(1.0), standardize=False)
        post = bnnpp.fit(model, (xf, yf), method="ensemble", seed=seed, progress=False, num_steps=3000, batch_size=128, members=5)
        pc = np.asarray(predict_probs(post, xc), np.float64)
        pt = np.asarray(predict_probs(post, d.x_test), np.float64)
        t = fit_temperature(pc, yc)
        per = scale_probs(pt, t).mean(0).astype(np.float64)
        lc, lt = (np.log(np.maximum(p.mean(0), 1e-300)) for p in (pc, pt))

        def pooled_nll(log_t, lc=lc):
            return -np.log(softmax_t(lc, np.exp(log_t))[np.arange(len(yc)), yc]).mean()

        tp = float(np.exp(minimize_scalar(pooled_nll, bounds=np.log([0.05, 20.0]), method="bounded").x))
        pooled = softmax_t(lt, tp)
        cc = np.stack([scale_probs(pc, t).mean(0), pc.mean(0), np.full(pc.shape[1:], 0.1)])
        ct = np.stack([per, pt.mean(0), np.full(pt.shape[1:], 0.1)])

        def ets_nll(a, cc=cc):
            w = np.exp(a) / np.exp(a).sum()
            return -np.log(np.maximum(np.tensordot(w, cc, 1)[np.arange(len(yc)), yc], 1e-300)).mean()

        a = minimize(ets_nll, np.zeros(3), method="Nelder-Mead").x
        w = np.exp(a) / np.exp(a).sum()
        ets = np.tensordot(w, ct, 1)
        y = d.y_test
        lines.append(f"| {seed} | {metrics.ece(pt.mean(0), y):.4f} | {t:.2f}, {metrics.ece(per, y):.4f}, {metrics.nll(per, y):.4f} | "
                     f"{tp:.2f}, {metrics.ece(pooled, y):.4f}, {metrics.nll(pooled, y):.4f} | "
                     f"{w[0]:.2f}/{w[1]:.2f}/{w[2]:.3f}, {metrics.ece(ets, y):.4f}, {metrics.nll(ets, y):.4f} |")
        print(lines[-1], flush=True)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "ensemble_scaling.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
