"""The per-side over-confidence check on small data with many inputs (issue 35): does it stay quiet on NUTS?

``bnnpp.inference.collapse.outside_growth`` takes the least growth of the predictive sd over the data's
sides (each input column, the outer rows above and below its mean). On the 1-d and 2-d problems of
``small_data.py`` NUTS grows 2.2–5.7× by it; this checks many inputs (boston: 13): ``n`` rows of a UCI set's
split 0, inputs and targets rescaled off unit scale (x·3 + 10, y·5 + 20: raw data, as a user's), a
d-50-1 tanh net under the hierarchical prior ``normal(scale=inverse_gamma(1, 1))``, each method at its
defaults (NUTS: 2 chains of 300 + 300). Rows: test NLL on the split's test rows (same rescaling), the
check's growth, whether the over-confidence line fired.

    python benchmarks/studies/overconfidence_many_inputs.py --set boston --rows 150

``--draw N`` draws other rows (seed N), ``--columns K`` keeps the first K inputs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from _common import default_data_dir, machine, write_results  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="boston")
    ap.add_argument("--rows", type=int, default=150)
    ap.add_argument("--draw", type=int, default=0, help="seed of the rows drawn from the split's training rows")
    ap.add_argument("--columns", type=int, default=None, help="keep the first COLUMNS inputs (default: all)")
    ap.add_argument("--methods", default="laplace,ensemble,advi,nuts", help="comma-separated; METHOD:OPTION=VALUE gives one option (e.g. laplace:hessian=kron)")
    ap.add_argument("--out", default=None, help="result name in studies/results (default overconfidence_many_inputs_SET)")
    ap.add_argument("--data-dir", default=None, help="where the UCI sets are (else $BNNPP_DATA_DIR or ../shared/data)")
    args = ap.parse_args(argv)
    import numpy as np

    import bnnpp
    from bnnpp import priors

    d = bnnpp.data.uci(args.set, 0, args.data_dir or default_data_dir())
    idx = np.random.default_rng(args.draw).choice(len(d.x_train), args.rows, replace=False)
    cols = slice(0, args.columns)
    x, y = d.x_train[idx][:, cols] * 3 + 10, d.y_train[idx] * 5 + 20
    xt, yt = d.x_test[:, cols] * 3 + 10, d.y_test * 5 + 20
    model = bnnpp.models.mlp((50,), activation="tanh", likelihood="gaussian", noise=None, prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)))
    rows = []
    for label in args.methods.split(","):
        method, _, setting = label.partition(":")
        options = {"num_chains": 2, "num_warmup": 300, "num_samples": 300} if method == "nuts" else {}
        if setting:
            key, _, value = setting.partition("=")
            options[key] = value
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            post = bnnpp.fit(model, (x, y), method=method, seed=0, progress=False, **options)
        score = post.predict(xt).scores(yt)
        check = post.stats.extras.get("small_data_check") or {}
        rows.append({"method": label, "nll": score["nll"], "rmse": score["rmse"], "growth": check.get("outside_growth"),
                     "overconfidence_warning": post.stats.extras.get("overconfidence_warning"), "seconds": time.perf_counter() - t0})
        print(f"{label}: nll {score['nll']:.3f} growth {rows[-1]['growth']} warned {bool(rows[-1]['overconfidence_warning'])}", flush=True)
    command = "python benchmarks/studies/" + shlex.join([os.path.basename(__file__), *(argv if argv is not None else sys.argv[1:])])
    lines = ["| method | test NLL | RMSE | check's growth (least side) | over-confidence line | s |", "|---|---|---|---|---|---|"]
    for r in rows:
        g = "—" if r["growth"] is None else f"{r['growth']:.2f}×"
        lines.append(f"| {r['method']} | {r['nll']:.3f} | {r['rmse']:.2f} | {g} | {'yes' if r['overconfidence_warning'] else 'no'} | {r['seconds']:.0f} |")
    name = args.out or f"overconfidence_many_inputs_{args.set}"
    drawn = f", row draw {args.draw}" if args.draw else ""
    md = (f"# The per-side over-confidence check on {args.rows} rows of {args.set} ({x.shape[1]} inputs{drawn})\n\n    {command}\n\n"
          f"{dt.date.today().isoformat()}, {machine()}\n\n" + "\n".join(lines) + "\n")
    write_results(os.path.join(HERE, "results"), name, {"command": command, "date": dt.date.today().isoformat(), "machine": machine(),
                                                         "rows": rows}, md)


if __name__ == "__main__":
    main()
