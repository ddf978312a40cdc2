"""Starts for the ensemble's members on small data with many inputs (issue 35; not adopted).

On 100 rows of UCI sets with 6–13 inputs the ensemble (members from U(±2), ``init_loc="auto_wide"``)
was sure where it missed. This fits the ensemble from three starts on the same rows and scores the
test NLL of each, and of a mixture of members from two of them:

- ``wide``: today's default, every layer U(±2);
- ``first``: the first layer's weights U(±2/sqrt(d)) (the pre-activation spread of one standardised
  input; identical to ``wide`` at d = 1), the rest U(±2). Not an option of bnnpp: the study
  replaces :func:`bnnpp.inference.joint.init_start` as map_estimate sees it, for this run only;
- ``fan_in``: ``init_loc="fan_in"`` (every layer U(±2/sqrt(fan_in)), map's start);
- ``fan_in 2 + wide 3``: members 0–1 of ``fan_in`` with members 2–4 of ``wide``, mixed equally.

Problems: a UCI set's split 0, ``--rows`` rows drawn with seed ``--draw``, rescaled as
``overconfidence_many_inputs.py`` does (x·3 + 10, y·5 + 20), a d-50-1 tanh net under
``normal(scale=inverse_gamma(1, 1))``; or a problem of ``small_data.py`` by name (its data seed 0).

    python benchmarks/studies/ensemble_starts_many_inputs.py --problems yacht:0,yacht:1,yacht:2,concrete:0,concrete:1,concrete:2,energy:0,energy:1,energy:2,boston:0,boston:1,boston:2,cubic,trend2d
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import shlex
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from _common import default_data_dir, machine, write_results  # noqa: E402

STARTS = ("wide", "first", "fan_in")


def _first_layer_start(original):
    """``init_start`` with ``"auto_wide"`` replaced by: first layer's weights U(±r/sqrt(fan_in)), every other site U(±r)."""
    from bnnpp.inference import joint

    def init_start(init_loc, layers):
        if init_loc != "auto_wide" or not layers:
            return original(init_loc, layers)
        first = next(iter(layers.values()))

        def draw(shapes, key, radius):
            return joint.init_glorot(shapes, key, radius, {first["sites"][0]: radius / math.sqrt(first["fan_in"])}, frozenset())

        return draw

    return init_start


def problem(spec: str, rows: int, data_dir: str):
    """``(x, y, x_test, y_test, model)`` for ``SET:DRAW`` (UCI) or a small_data.py problem name."""
    import numpy as np

    import bnnpp
    from bnnpp import priors

    name, _, draw = spec.partition(":")
    if not draw:
        import small_data

        p = small_data.problem(name, 0)
        return p["x"], p["y"], p["x_test"], p["y_test"], p["model"]
    d = bnnpp.data.uci(name, 0, data_dir)
    idx = np.random.default_rng(int(draw)).choice(len(d.x_train), rows, replace=False)
    model = bnnpp.models.mlp((50,), activation="tanh", likelihood="gaussian", noise=None, prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)))
    return d.x_train[idx] * 3 + 10, d.y_train[idx] * 5 + 20, d.x_test * 3 + 10, d.y_test * 5 + 20, model


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", default="yacht:0,concrete:0")
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--data-dir", default=None, help="where the UCI sets are (else $BNNPP_DATA_DIR or ../shared/data)")
    args = ap.parse_args(argv)
    import numpy as np
    from scipy.special import logsumexp
    from scipy.stats import norm

    import bnnpp
    from bnnpp.inference import map_estimate

    original = map_estimate.init_start
    rows = []
    for spec in args.problems.split(","):
        x, y, xt, yt, model = problem(spec, args.rows, args.data_dir or default_data_dir())
        logp = {}  # start → (members, test rows) log densities
        for start in STARTS:
            map_estimate.init_start = _first_layer_start(original) if start == "first" else original
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    post = bnnpp.fit(model, (x, y), method="ensemble", seed=0, progress=False,
                                     **({"init_loc": "fan_in"} if start == "fan_in" else {}))
            finally:
                map_estimate.init_start = original
            pred = post.predict(xt)
            means = np.asarray(pred.draws).reshape(-1, len(yt))
            sds = np.broadcast_to(np.asarray(pred.noise), np.shape(pred.draws)).reshape(-1, len(yt))
            logp[start] = norm.logpdf(np.asarray(yt).reshape(1, -1), means, sds)
        logp["fan_in 2 + wide 3"] = np.concatenate([logp["fan_in"][:2], logp["wide"][2:]])
        nll = {k: float(-np.mean(logsumexp(v, axis=0) - math.log(v.shape[0]))) for k, v in logp.items()}
        rows.append({"problem": spec, "inputs": int(np.prod(np.shape(x)[1:])), "nll": nll})
        print(spec, {k: round(v, 3) for k, v in nll.items()}, flush=True)
    command = "python benchmarks/studies/" + shlex.join([os.path.basename(__file__), *(argv if argv is not None else sys.argv[1:])])
    names = [*STARTS, "fan_in 2 + wide 3"]
    lines = ["| problem (SET:DRAW) | inputs | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    lines += [f"| {r['problem']} | {r['inputs']} | " + " | ".join(f"{r['nll'][k]:.3f}" for k in names) + " |" for r in rows]
    md = (f"# The ensemble's start on small data with many inputs: test NLL\n\n    {command}\n\n{dt.date.today().isoformat()}, {machine()}; "
          f"{args.rows} rows for the UCI sets, fit seed 0\n\n" + "\n".join(lines) + "\n")
    write_results(os.path.join(HERE, "results"), "ensemble_starts_many_inputs",
                  {"command": command, "date": dt.date.today().isoformat(), "machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
