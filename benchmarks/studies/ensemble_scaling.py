"""Why the NLL-optimal temperature raises a deep ensemble's ECE on MNIST, and which held-out
calibrations reach ECE ≤ 0.01 (issue 40). Protocol of ``temperature_scaling.py``: MLP
784-200-10 (ReLU, N(0, 1) weights), fitted with the method's defaults (3,000 Adam steps of 128,
ensemble of 5) on the first 10,000 training images, every temperature fitted on the next 5,000
(never fitted, never tested), ECE (15 equal-width bins, Guo et al. 2017) / NLL / Brier on the
10,000 test images. Per method and fit seed:

- per draw, NLL (bnnpp's ``Posterior.calibrate``): every draw's log-probabilities divided by one
  T that minimises the NLL of the averaged predictive on the calibration split (Guo et al.);
- pooled, NLL (Rahaman & Thiery 2021, "pool then calibrate"): the averaged predictive's
  log-probabilities divided by T;
- per draw / pooled, Brier: the same T families, T minimising the Brier score instead (also a
  proper scoring rule, but bounded per row, so a few confidently wrong rows weigh less; per
  draw is ``Posterior.calibrate(..., temperature_loss="brier")``);
- ETS (Zhang, Kailkhura & Han 2020, "Mix-n-Match", eq. 8): w1 · per-draw NLL-scaled + w2 ·
  unscaled + w3 · uniform, weights by NLL on the calibration split;
- diagnostics: the top confidence bin (> 14/15, most test rows) — its share and its accuracy
  minus confidence, raw and after the per-draw NLL scaling; the share of the calibration NLL
  that the misclassified rows carry; the ECE-optimal T on the calibration split (a grid, for
  reference); the bootstrap sd of the test ECE (200 resamples of the test rows).

    python benchmarks/studies/ensemble_scaling.py --methods ensemble,map --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time

import numpy as np
from scipy.optimize import minimize, minimize_scalar

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from _common import default_data_dir, machine  # noqa: E402

OPTIONS = {"map": {"num_steps": 3000, "batch_size": 128}, "ensemble": {"num_steps": 3000, "batch_size": 128, "members": 5}}
LOG_T = (np.log(0.05), np.log(20.0))


def per_draw(p, t):
    """Per-draw temperature scaling then the average: ``(S, n, C)`` → ``(n, C)`` float64."""
    from bnnpp.calibrate import scale_probs

    return np.asarray(scale_probs(p, t), np.float64).mean(0)


def pooled(p, t):
    """The averaged predictive's log-probabilities divided by T: ``(S, n, C)`` → ``(n, C)``."""
    z = np.log(np.maximum(p.mean(0), 1e-300)) / t
    z -= z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def fit_t(p, y, family, loss):
    """The T in [0.05, 20] minimising ``loss`` ("nll" or "brier") of ``family(p, T)`` on (p, y)."""
    from bnnpp import metrics

    f = metrics.nll if loss == "nll" else metrics.brier
    r = minimize_scalar(lambda lt: f(family(p, np.exp(lt)), y), bounds=LOG_T, method="bounded", options={"xatol": 1e-4})
    return float(np.exp(r.x))


def top_bin(mean, y, num_bins=15):
    """(share of rows, accuracy − confidence) of the top equal-width confidence bin."""
    conf = mean.max(-1)
    m = conf > 1 - 1 / num_bins
    return float(m.mean()), float((mean.argmax(-1)[m] == y[m]).mean() - conf[m].mean())


def boot_sd(mean, y, reps=200, seed=0):
    """Bootstrap sd of the test ECE over resamples of the test rows."""
    from bnnpp import metrics

    rng = np.random.default_rng(seed)
    return float(np.std([metrics.ece(mean[i], y[i]) for i in (rng.integers(0, len(y), len(y)) for _ in range(reps))]))


def analyse(pc, yc, pt, yt) -> dict:
    """Every calibration of the module docstring for per-draw probabilities ``pc`` (calibration)
    and ``pt`` (test), ``(S, n, C)``: a dict of T's, test ECE/NLL/Brier and diagnostics."""
    from bnnpp import metrics

    def scores(mean):
        return {"ece": metrics.ece(mean, yt), "nll": metrics.nll(mean, yt), "brier": metrics.brier(mean, yt),
                "ece_sd": boot_sd(mean, yt)}

    out = {"accuracy": metrics.accuracy(pt.mean(0), yt), "raw": scores(pt.mean(0))}
    from bnnpp.calibrate import fit_temperature

    for fam_name, fam in (("per_draw", per_draw), ("pooled", pooled)):
        for loss in ("nll", "brier"):
            # per draw: the library's fit (Posterior.calibrate(..., temperature_loss=loss))
            t = fit_temperature(pc, yc, loss) if fam_name == "per_draw" else fit_t(pc, yc, fam, loss)
            out[f"{fam_name}_{loss}"] = {"T": t, **scores(fam(pt, t))}
    t = out["per_draw_nll"]["T"]
    cc = np.stack([per_draw(pc, t), pc.mean(0), np.full(pc.shape[1:], 1 / pc.shape[-1])])
    ct = np.stack([per_draw(pt, t), pt.mean(0), np.full(pt.shape[1:], 1 / pt.shape[-1])])

    def ets_nll(a):
        w = np.exp(a) / np.exp(a).sum()
        return -np.log(np.maximum(np.tensordot(w, cc, 1)[np.arange(len(yc)), yc], 1e-300)).mean()

    a = minimize(ets_nll, np.zeros(3), method="Nelder-Mead").x
    w = np.exp(a) / np.exp(a).sum()
    out["ets"] = {"weights": [float(v) for v in w], **scores(np.tensordot(w, ct, 1))}
    grid = np.exp(np.linspace(np.log(0.5), np.log(3.0), 121))
    t_ece = float(grid[np.argmin([metrics.ece(per_draw(pc, g), yc) for g in grid])])
    out["per_draw_ece_grid"] = {"T": t_ece, **scores(per_draw(pt, t_ece))}
    mc = pc.mean(0)
    row_nll = -np.log(np.maximum(mc[np.arange(len(yc)), yc], 1e-300))
    wrong = mc.argmax(-1) != yc
    out["diagnostics"] = {
        "cal_nll_share_of_misclassified": float(row_nll[wrong].sum() / row_nll.sum()),
        "cal_misclassified_share": float(wrong.mean()),
        "top_bin_raw": top_bin(pt.mean(0), yt),
        "top_bin_per_draw_nll": top_bin(per_draw(pt, t), yt),
    }
    return out


def markdown(result) -> str:
    lines = ["# Temperature scaling of MNIST classifiers: which T, fitted how, and the test ECE", "",
             f"`{result['produced_by']}`, {result['date']}, {result['machine']}.", "", result["protocol"], "",
             "Test ECE (15 equal-width bins; ± its bootstrap sd over the test rows) after each calibration; T fitted on the "
             "calibration split (never on the test images).", "",
             "| method | seed | acc | raw | per draw, NLL | pooled, NLL | per draw, Brier | pooled, Brier | ETS | per draw, ECE-optimal T on cal (grid) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        cells = [f"{r['raw']['ece']:.4f} ± {r['raw']['ece_sd']:.4f}"]
        for k in ("per_draw_nll", "pooled_nll", "per_draw_brier", "pooled_brier"):
            cells.append(f"T {r[k]['T']:.2f}: {r[k]['ece']:.4f}")
        cells.append(f"{r['ets']['ece']:.4f}")
        cells.append(f"T {r['per_draw_ece_grid']['T']:.2f}: {r['per_draw_ece_grid']['ece']:.4f}")
        lines.append(f"| {r['method']} | {r['seed']} | {r['accuracy']:.4f} | " + " | ".join(cells) + " |")
    lines += ["", "Mean over seeds (test ECE, NLL):", "", "| method | calibration | T (mean) | ECE mean ± sd over seeds | max ECE | NLL |",
              "|---|---|---|---|---|---|"]
    for m in dict.fromkeys(r["method"] for r in result["rows"]):
        rs = [r for r in result["rows"] if r["method"] == m]
        for k in ("raw", "per_draw_nll", "pooled_nll", "per_draw_brier", "pooled_brier", "ets", "per_draw_ece_grid"):
            e = np.array([r[k]["ece"] for r in rs])
            t = f"{np.mean([r[k]['T'] for r in rs]):.2f}" if "T" in rs[0][k] else "—"
            lines.append(f"| {m} | {k} | {t} | {e.mean():.4f} ± {e.std(ddof=1) if len(e) > 1 else 0:.4f} | {e.max():.4f} | "
                         f"{np.mean([r[k]['nll'] for r in rs]):.4f} |")
    lines += ["", "Diagnostics (top bin: confidence > 14/15; gap = accuracy − confidence, negative = over-confident):", "",
              "| method | seed | misclassified share of cal rows | their share of the cal NLL | top bin raw: share, gap | "
              "top bin after per-draw NLL scaling: share, gap |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        d = r["diagnostics"]
        lines.append(f"| {r['method']} | {r['seed']} | {d['cal_misclassified_share']:.3f} | {d['cal_nll_share_of_misclassified']:.2f} | "
                     f"{d['top_bin_raw'][0]:.3f}, {d['top_bin_raw'][1]:+.4f} | "
                     f"{d['top_bin_per_draw_nll'][0]:.3f}, {d['top_bin_per_draw_nll'][1]:+.4f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="ensemble,map")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--train-subset", type=int, default=10000)
    p.add_argument("--calibration", type=int, default=5000)
    p.add_argument("--cache", default="", help="folder for the per-draw probabilities (refits are skipped when present)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "ensemble_scaling"))
    args = p.parse_args(argv)
    import bnnpp
    from bnnpp.evaluation import predict_probs
    from bnnpp.files import atomic_file

    d = bnnpp.data.load("mnist", default_data_dir(), validation=0, flatten=True)
    n, c = args.train_subset, args.calibration
    xf, yf = d.x_train[:n], d.y_train[:n]
    xc, yc = d.x_train[n : n + c], np.asarray(d.y_train[n : n + c])
    yt = np.asarray(d.y_test)
    rows, t0 = [], time.perf_counter()
    for m in [m for m in args.methods.split(",") if m]:
        for seed in [int(s) for s in args.seeds.split(",") if s]:
            path = os.path.join(args.cache, f"{m}_{seed}_{n}_{c}.npz") if args.cache else ""
            if path and os.path.exists(path):
                z = np.load(path)
                pc, pt = z["pc"], z["pt"]
            else:
                model = bnnpp.models.mlp((200,), activation="relu", num_classes=10, prior=bnnpp.priors.normal(1.0), standardize=False)
                post = bnnpp.fit(model, (xf, yf), method=m, seed=seed, progress=False, **OPTIONS[m])
                pc = np.asarray(predict_probs(post, xc), np.float64)
                pt = np.asarray(predict_probs(post, d.x_test), np.float64)
                if path:
                    os.makedirs(args.cache, exist_ok=True)
                    np.savez(path, pc=pc.astype(np.float32), pt=pt.astype(np.float32))
            rows.append({"method": m, "seed": seed, **analyse(pc, yc, pt, yt)})
            r = rows[-1]
            print(m, seed, {k: round(v["ece"], 4) for k, v in r.items() if isinstance(v, dict) and "ece" in v}, flush=True)
    cmd = "python benchmarks/studies/ensemble_scaling.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(), "seconds": time.perf_counter() - t0,
              "protocol": f"MLP 784-200-10, fitted on the first {n:,} MNIST training images, calibrated on the next {c:,}, "
                          f"scored on the 10,000 test images; options {OPTIONS}", "rows": rows}
    for ext, text in ((".json", json.dumps(result, indent=1)), (".md", markdown(result))):
        with atomic_file(args.out + ext, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
