"""Every sampler and approximation at its defaults on the six textbook models whose latent sizes
follow the data (``tests/reference_models.py``), against the reference moments of long plain-
NumPyro NUTS runs (``tests/data/reference_posteriors.json``, ``benchmarks/reference_posteriors.py``).

Per fit: the mean squared standardised error of the posterior means over every latent coordinate
(z = (mean − reference mean) / reference sd), the largest |z| and where, the range of the sds'
ratios to the reference's (``bnnpp.diagnostics.moment_error``), the wall time and the warnings
the fit printed. A sampler passes with mean z² < 0.01 and every sd within 10%; the
approximations (advi, pathfinder, laplace) are reported as distances. A refusal (one-line
ValueError before compiling) is recorded as such.

    python benchmarks/reference_suite.py                      # every method x problem
    python benchmarks/reference_suite.py --methods nuts,meads --problems funnel
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from _common import HERE, machine, write_results  # noqa: E402

SAMPLERS = ("nuts", "mclmc", "meads", "chees", "sgld")
APPROXIMATIONS = ("advi", "pathfinder", "laplace")
REFERENCE = os.path.join(HERE, "..", "tests", "data", "reference_posteriors.json")


def run_one(method: str, problem: str, seed: int) -> dict:
    import numpy as np
    from reference_models import PROBLEMS

    import bnnpp
    import bnnpp.inference.chees  # noqa: F401 - registers chees
    from bnnpp.diagnostics import moment_error

    with open(REFERENCE) as f:
        reference = json.load(f)[problem]["sites"]
    model, x, y = PROBLEMS[problem]
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            post = bnnpp.fit(model, (x, y), method=method, seed=seed, progress=False)
    except ValueError as e:
        return {"method": method, "problem": problem, "refused": str(e)}
    seconds = time.perf_counter() - t0
    error = moment_error(post, reference)
    lines = [str(w.message)[:90] for w in caught if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    return {
        "method": method,
        "problem": problem,
        "seconds": seconds,
        **error,
        "draws": int(post.num_chains * post.num_draws),
        "divergences": post.stats.extras.get("divergences"),
        "warnings": lines,
        "finite": bool(all(np.all(np.isfinite(np.asarray(v))) for v in post.samples.values())),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default=",".join(SAMPLERS + APPROXIMATIONS))
    p.add_argument("--problems", default=None, help="comma-separated (default: every problem in the reference file)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="reference_suite", help="result file name under benchmarks/results/")
    a = p.parse_args()
    with open(REFERENCE) as f:
        problems = a.problems.split(",") if a.problems else list(json.load(f))
    rows = []
    for problem in problems:
        for method in a.methods.split(","):
            r = run_one(method, problem, a.seed)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "warnings"}), flush=True)
    command = "python benchmarks/reference_suite.py " + " ".join(sys.argv[1:])
    lines = [
        "# reference_suite — samplers and approximations against reference posteriors",
        "",
        f"`{command.strip()}` on {machine()}; seed {a.seed}, every method at its defaults. "
        "Pass (samplers): mean z² < 0.01 and every sd within 10% of the reference's.",
        "",
        "| problem | method | mean z² | max abs z (where) | sd ratio min–max | pass | seconds | draws | divergences | warnings |",
        "|---|---|---:|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['problem']} | {r['method']} | refused: {r['refused'][:120]} | | | | | | | |")
            continue
        kind = ("yes" if r["passed"] else "**no**") if r["method"] in SAMPLERS else "(distance)"
        warned = "; ".join(sorted(set(r["warnings"]))) or "none"
        lines.append(
            f"| {r['problem']} | {r['method']} | {r['mean_sq_z']:.4f} | {r['max_abs_z']:.2f} ({r['worst']}) | "
            f"{r['sd_ratio_min']:.2f}–{r['sd_ratio_max']:.2f} | {kind} | {r['seconds']:.0f} | {r['draws']} | "
            f"{r['divergences'] if r['divergences'] is not None else ''} | {warned} |"
        )
    result = {"command": command.strip(), "machine": machine(), "seed": a.seed, "rows": rows}
    paths = write_results(os.path.join(HERE, "results"), a.name, result, "\n".join(lines) + "\n")
    print("\n".join(lines))
    print("wrote", *paths)


if __name__ == "__main__":
    main()
