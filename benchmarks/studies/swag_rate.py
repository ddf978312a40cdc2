"""SWAG's SWAG-phase learning rate: the former fixed 0.01 against the default
``min(0.01, 1.5 / λ)`` (λ the largest Hessian eigenvalue of the per-example loss at each
member's pretrained mode, ``bnnpp/inference/swag.py``), on the problems it must not change
(moons and circles with the backends table's model, the 32-point sinusoid with regression.py's
model and SWAG options) and on the UCI sets where 0.01 diverged (conformal.py's protocol,
split 0). Per problem and rate: the rate used, λ, the pretrained and mean SWAG-phase losses,
whether the fit warned that the SGD phase left the mode, and the test accuracy / NLL
(classification) or RMSE / NLL (regression, in standardised units for UCI).

    python benchmarks/studies/swag_rate.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from _common import default_data_dir, machine, write_results  # noqa: E402

RATES = {"0.01 (former default)": 0.01, "default": None}


def problems(data_dir: str, uci: list[str]):
    """``(name, model, data as (x, y, x_test, y_test), swag options)`` of every problem."""
    import bnnpp
    from bnnpp import priors

    for name in ("moons", "circles"):  # benchmarks/backends.py
        d = bnnpp.data.load_synthetic(name, seed=0)
        model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
        yield name, model, (d.x_train, d.y_train, d.x_test, d.y_test), {}
    d = bnnpp.data.sinusoid()  # benchmarks/regression.py, FULL swag options but the rate
    model = bnnpp.models.mlp((20, 20), activation="relu", likelihood="gaussian", noise=1.0, prior=priors.scale_mixture(0.2, 1.0, 0.1))
    yield "sinusoid", model, (d.x_train, d.y_train, d.x_test, d.y_test), {"pretrain_steps": 5000, "swag_epochs": 200, "batch_size": 8}
    for name in uci:  # benchmarks/conformal.py, split 0
        d = bnnpp.data.uci(name, 0, data_dir, validation=0.2, seed=0)
        model = bnnpp.models.mlp((50,), activation="relu", likelihood="gaussian", prior=priors.normal(1.0))
        yield f"{name} (split 0)", model, (d.x_train, d.y_train, d.x_test, d.y_test), {}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uci", default="yacht,boston,energy")
    p.add_argument("--data-dir", default=default_data_dir())
    p.add_argument("--out", default=os.path.join(HERE, "results", "swag_rate"))
    args = p.parse_args(argv)
    import bnnpp
    from bnnpp import metrics

    rows, t0 = [], time.perf_counter()
    for name, model, (x, y, xt, yt), options in problems(args.data_dir, [s for s in args.uci.split(",") if s]):
        for label, rate in RATES.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                post = bnnpp.fit(model, (x, y), method="swag", seed=0, progress=False, swag_learning_rate=rate, num_samples=50, **options)
            pred = post.predict(xt)
            ex = post.stats.extras
            row = {"problem": name, "rate_option": label, "rate": ex["swag_learning_rate"][0], "curvature": ex["curvature"][0],
                   "pretrain_loss": ex["pretrain_loss"][0], "swag_mean_loss": ex["swag_mean_loss"][0],
                   "left_mode": any("left the pretrained mode" in str(w.message) for w in caught)}
            yt_ = np.asarray(yt)
            if pred.task == "classification":
                row |= {"accuracy": metrics.accuracy(pred.mean, yt_), "nll": metrics.nll(pred.mean, yt_)}
            else:
                row |= {"rmse": metrics.rmse(pred.mean, yt_), "nll": metrics.predictive_nll(pred.log_density(yt_))}
            rows.append(row)
            print(row, flush=True)
    cmd = "python benchmarks/studies/swag_rate.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(), "seconds": time.perf_counter() - t0, "rows": rows}
    lines = ["# SWAG's SWAG-phase rate: the former fixed 0.01 against min(0.01, 1.5 / λ)", "", f"`{cmd}`, {result['date']}, {result['machine']}.", "",
             "| problem | rate option | rate used | λ at the mode | pretrained loss | mean SWAG-phase loss | left the mode | accuracy or RMSE | NLL |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        score = f"acc {r['accuracy']:.4f}" if "accuracy" in r else f"RMSE {r['rmse']:.4g}"
        lam = "—" if r["curvature"] is None else f"{r['curvature']:.4g}"
        lines.append(f"| {r['problem']} | {r['rate_option']} | {r['rate']:.3g} | {lam} | {r['pretrain_loss']:.4g} | {r['swag_mean_loss']:.4g} | "
                     f"{'yes' if r['left_mode'] else 'no'} | {score} | {r['nll']:.4g} |")
    write_results(os.path.dirname(args.out), os.path.basename(args.out), result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
