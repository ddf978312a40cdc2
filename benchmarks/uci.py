"""The UCI regression benchmark (Hernández-Lobato & Adams 2015): nine sets, the standard
train/test splits (20; 5 for protein), one hidden layer of 50 ReLU units (100 for protein),
inputs and targets standardised on the training rows, test log-likelihood and RMSE in the
original units, mean ± standard error over splits — beside the published numbers of
mean-field VI (Graves 2011), PBP and MC dropout (Gal & Ghahramani 2016, Table 1) and deep
ensembles (Lakshminarayanan et al. 2017, Table 1).

Protocol per set, method and split:

1. The split's training rows are divided 80/20 (seeded) into a fitting part and a
   validation part. Each model of the grid is fitted on the fitting part and scored by its
   validation log-likelihood; the test split is never looked at. The grid crosses the weight
   prior (``N(0, 1)``, and ``N(0, s²)`` with one scale per layer, ``s ~ HalfNormal(1)``) with
   the observation noise (``--likelihoods``): ``gaussian``, one learned sd for all rows
   (``noise ~ HalfNormal(1)`` on the standardised targets, as in Gal & Ghahramani 2016), and
   ``heteroscedastic``, an sd the network predicts per row from a second output unit (Nix &
   Weigend 1994; as in Lakshminarayanan et al. 2017). A fit whose validation score is not
   finite is never chosen. Every fit stops at its first non-finite step and keeps the state
   before it, as ``bnnpp.fit`` does (:func:`bnnpp.inference.runner.guarded_trace_fit`); the
   result counts such stops.
2. The chosen model is fitted again on the whole training split (standardised on it) and
   scored on the test split.

Every method runs at its own defaults (what a user gets with no options) unless ``--set``
says otherwise. All splits of a set are fitted in one ``jax.vmap``-ed program per method and
grid entry (:func:`bnnpp.inference.runner.guarded_trace_fit`): same shapes, different data
and seeds.
NUTS (``--nuts-sets``, default the three smallest sets) runs split by split.

    python benchmarks/uci.py --data-dir ../shared/data                 # the full run
    python benchmarks/uci.py --data-dir ../shared/data --quick         # 2 splits, short fits
    python benchmarks/uci.py --sets yacht,boston --methods advi,bbb    # a part
    python benchmarks/uci.py --summary results/uci_a.json,results/uci_b.json --tag summary

``--summary`` fits nothing: it reads result files written by this script and writes the best
variational row per set over all of them (rows with the standard number of splits only),
beside the published numbers, with the verdict counted.

Writes ``results/uci.{json,md}`` (``--results``); ``--tag`` appends to the file names.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections import Counter

import numpy as np
from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))

SETS = ("boston", "concrete", "energy", "kin8nm", "naval", "power", "protein", "wine", "yacht")
NUTS_SETS = ("yacht", "boston", "energy")

#: Published test log-likelihood and RMSE, mean ± standard error over the splits, per set:
#: {method: (ll, ll_se, rmse, rmse_se)}. VI (Graves 2011), PBP and MC dropout from Gal &
#: Ghahramani (2016, ICML), Table 1; deep ensembles from Lakshminarayanan et al. (2017),
#: Table 1 (which reports NLL; negated here).
PUBLISHED = {
    "boston": {"vi": (-2.90, 0.07, 4.32, 0.29), "pbp": (-2.57, 0.09, 3.01, 0.18), "mc_dropout": (-2.46, 0.25, 2.97, 0.85), "ensemble": (-2.41, 0.25, 3.28, 1.00)},
    "concrete": {"vi": (-3.39, 0.02, 7.19, 0.12), "pbp": (-3.16, 0.02, 5.67, 0.09), "mc_dropout": (-3.04, 0.09, 5.23, 0.53), "ensemble": (-3.06, 0.18, 6.03, 0.58)},
    "energy": {"vi": (-2.39, 0.03, 2.65, 0.08), "pbp": (-2.04, 0.02, 1.80, 0.05), "mc_dropout": (-1.99, 0.09, 1.66, 0.19), "ensemble": (-1.38, 0.22, 2.09, 0.29)},
    "kin8nm": {"vi": (0.90, 0.01, 0.10, 0.00), "pbp": (0.90, 0.01, 0.10, 0.00), "mc_dropout": (0.95, 0.03, 0.10, 0.00), "ensemble": (1.20, 0.02, 0.09, 0.00)},
    "naval": {"vi": (3.73, 0.12, 0.01, 0.00), "pbp": (3.73, 0.01, 0.01, 0.00), "mc_dropout": (3.80, 0.05, 0.01, 0.00), "ensemble": (5.63, 0.05, 0.00, 0.00)},
    "power": {"vi": (-2.89, 0.01, 4.33, 0.04), "pbp": (-2.84, 0.01, 4.12, 0.03), "mc_dropout": (-2.80, 0.05, 4.02, 0.18), "ensemble": (-2.79, 0.04, 4.11, 0.17)},
    "protein": {"vi": (-2.99, 0.01, 4.84, 0.03), "pbp": (-2.97, 0.00, 4.73, 0.01), "mc_dropout": (-2.89, 0.01, 4.36, 0.04), "ensemble": (-2.83, 0.02, 4.71, 0.06)},
    "wine": {"vi": (-0.98, 0.01, 0.65, 0.01), "pbp": (-0.97, 0.01, 0.64, 0.01), "mc_dropout": (-0.93, 0.06, 0.62, 0.04), "ensemble": (-0.94, 0.12, 0.64, 0.04)},
    "yacht": {"vi": (-3.43, 0.16, 6.89, 0.67), "pbp": (-1.63, 0.02, 1.02, 0.05), "mc_dropout": (-1.55, 0.12, 1.11, 0.38), "ensemble": (-1.18, 0.21, 1.58, 0.48)},
}
#: The methods whose fit is a variational posterior, for the "best variational method" verdict:
#: mean-field ADVI, Bayes by Backprop and (sparse) variational dropout (Molchanov et al. 2017;
#: a Gaussian q per weight under the log-uniform prior).
VARIATIONAL = ("advi", "bbb", "vd")

QUICK = {
    "map": {"num_steps": 300},
    "advi": {"num_steps": 500, "num_samples": 100},
    "bbb": {"epochs": 300, "num_samples": 100},
    "nuts": {"num_chains": 1, "num_warmup": 50, "num_samples": 50},
}


LIKELIHOODS = ("gaussian", "heteroscedastic")


def _priors():
    from bnnpp import priors

    return {"normal(1)": priors.normal(1.0), "normal(half_normal(1)) per layer": priors.normal(priors.half_normal(1.0))}


def _grid(likelihoods=LIKELIHOODS) -> dict:
    """The validation grid: ``{label: (prior, likelihood)}``, every prior with every likelihood."""
    return {(f"{label}, {lik}" if len(likelihoods) > 1 else label): (prior, lik)
            for lik in likelihoods for label, prior in _priors().items()}


def _model(prior, hidden: int, likelihood: str = "gaussian"):
    import bnnpp

    return bnnpp.models.mlp((hidden,), activation="relu", likelihood=likelihood, prior=prior)


def _scores(loc: np.ndarray, scale: np.ndarray, y: np.ndarray, y_scale: float) -> tuple[float, float]:
    """Test log-likelihood per point and RMSE in the original units from standardised
    predictive draws ``loc``/``scale`` ``(S, n)`` and targets ``y`` ``(n,)``."""
    from bnnpp import metrics

    ll = -metrics.gaussian_nll(loc, scale, y) - np.log(y_scale)  # the density of y·σ_y + μ_y
    return float(ll), float(metrics.rmse(loc.mean(0), y) * y_scale)


def fit_vmapped(method: str, spec: tuple, hidden: int, xs, ys, x_evals, options: dict, seeds):
    """Fit ``method`` with the model ``spec`` = ``(prior, likelihood)`` to every split at once,
    ``xs``/``ys`` ``(K, n, d)``/``(K, n)``; returns the predictive ``loc``/``scale`` draws at ``x_evals`` ``(K, S, m)`` each, and ``(K,)``
    the step at which each fit stopped on a non-finite loss (-1: it ran to the end; the fit then
    keeps the state before that step, as ``bnnpp.fit`` does)."""
    import jax
    import jax.numpy as jnp

    from bnnpp.inference.registry import get_method
    from bnnpp.inference.runner import guarded_trace_fit
    from bnnpp.introspection import observation

    chosen = get_method(method)
    parsed = chosen.parse(options)
    parsed.check_data(xs[0], ys[0])
    model = _model(spec[0], hidden, spec[1])
    algorithm = chosen.build(model, xs[0], ys[0], parsed)

    def one(x, y, x_eval, seed):
        draws, _, stopped_at = guarded_trace_fit(algorithm, jax.random.PRNGKey(seed), x, y)
        s = next(iter(draws.values())).shape[0]
        keys = jax.random.split(jax.random.PRNGKey(0), s)
        # draws in batches of 50: all 1,000 at once hold (1000, n, hidden) activations, 33 GB for protein
        out = jax.lax.map(lambda dk: observation(model, dk[0], dk[1], x_eval, None), (draws, keys), batch_size=50)
        return out["loc"], out["scale"], stopped_at

    loc, scale, stopped = jax.jit(jax.vmap(one))(jnp.asarray(xs), jnp.asarray(ys), jnp.asarray(x_evals), jnp.asarray(seeds, jnp.int32))
    return np.asarray(loc, np.float64), np.asarray(scale, np.float64), np.asarray(stopped)


def fit_one(method: str, spec: tuple, hidden: int, d, options: dict, seed: int, x_eval):
    """One split with ``bnnpp.fit`` (methods with their own driver, e.g. nuts)."""
    import bnnpp

    post = bnnpp.fit(_model(spec[0], hidden, spec[1]), (d[0], d[1]), method=method, seed=seed, progress=False, **options)
    p = post.predict(x_eval)
    return p.draws, p.noise, -1 if post.stats.stopped_at is None else post.stats.stopped_at


def fit_splits(method: str, spec: tuple, hidden: int, datasets: list, x_evals: list, options: dict, seeds: list[int]):
    """Fit ``method`` to each dataset's training rows and predict at its ``x_evals`` entry:
    all at once (:func:`fit_vmapped`) for methods the runner drives, one by one otherwise.
    Returns ``loc``, ``scale`` ``(K, S, m)`` and the stop steps ``(K,)`` (-1: no stop)."""
    import bnnpp

    if bnnpp.inference.get_method(method).build is not None:
        return fit_vmapped(method, spec, hidden, np.stack([d.x_train for d in datasets]), np.stack([d.y_train for d in datasets]),
                           np.stack(x_evals), options, seeds)
    outs = [fit_one(method, spec, hidden, (d.x_train, d.y_train), options, seed, xe)
            for d, xe, seed in zip(datasets, x_evals, seeds, strict=True)]
    return np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs]), np.asarray([o[2] for o in outs])


def run_set(name: str, method: str, splits: list[int], data_dir: str, options: dict, seed: int,
            likelihoods=LIKELIHOODS) -> dict:
    """Validation choice of the prior and likelihood, then the test scores, for every split of one set."""
    import bnnpp

    hidden = 100 if name == "protein" else 50
    grid = _grid(likelihoods)
    val = [bnnpp.data.uci(name, s, data_dir, validation=0.2, seed=seed) for s in splits]
    full = [bnnpp.data.uci(name, s, data_dir) for s in splits]
    t0 = time.perf_counter()
    val_ll, val_stopped = {}, {}
    for label, spec in grid.items():
        loc, scale, stops = fit_splits(method, spec, hidden, val, [d.x_val for d in val], options, [seed + s for s in splits])
        val_stopped[label] = int(np.sum(stops >= 0))
        val_ll[label] = [_scores(loc[k], scale[k], d.y_val, d.y_scale)[0] for k, d in enumerate(val)]
    # a fit that diverged on the fitting part scores nan: it is never chosen
    ranked = {lab: np.nan_to_num(np.asarray(v), nan=-np.inf) for lab, v in val_ll.items()}
    labels = list(grid)
    chosen = [labels[int(np.argmax([ranked[lab][k] for lab in labels]))] for k in range(len(splits))]
    lls, rmses, stopped = np.zeros(len(splits)), np.zeros(len(splits)), np.full(len(splits), -1)
    for label in set(chosen):
        idx = [k for k, c in enumerate(chosen) if c == label]
        ds = [full[k] for k in idx]
        loc, scale, stops = fit_splits(method, grid[label], hidden, ds, [d.x_test for d in ds], options, [seed + splits[k] for k in idx])
        for j, (k, d) in enumerate(zip(idx, ds, strict=True)):
            lls[k], rmses[k] = _scores(loc[j], scale[j], d.y_test, d.y_scale)
            stopped[k] = stops[j]
    se = (lambda v: float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None)
    return {
        "set": name, "method": method, "splits": splits, "hidden": hidden,
        "test_ll": float(lls.mean()), "test_ll_se": se(lls), "rmse": float(rmses.mean()), "rmse_se": se(rmses),
        "per_split": {"test_ll": lls.tolist(), "rmse": rmses.tolist(), "prior": chosen, "likelihood": [grid[c][1] for c in chosen],  # prior: the chosen grid entry
                      "stopped_at": stopped.tolist()},
        "val_ll": {lab: float(np.mean(v)) for lab, v in val_ll.items()}, "val_nonfinite": {lab: int(np.sum(~np.isfinite(v))) for lab, v in val_ll.items()},
        "val_stopped": val_stopped,
        "seconds": time.perf_counter() - t0, "options": options,
    }


def markdown(result: dict) -> str:
    rows = result["rows"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    sets = list(dict.fromkeys(r["set"] for r in rows))
    by = {(r["set"], r["method"]): r for r in rows}

    def cell(r, key):
        if r is None:
            return "—"
        se = r[f"{key}_se"]
        return f"{r[key]:.2f}" + ("" if se is None else f" ± {se:.2f}")

    pub = ("vi", "pbp", "mc_dropout", "ensemble")
    lines = [
        "# UCI regression: test log-likelihood and RMSE (original units)",
        "",
        f"`{result['produced_by']}`, {result['date']}, {result['machine']}.",
        f"{result['protocol']}",
        "",
        "## Test log-likelihood (higher is better), mean ± standard error over splits",
        "",
        "| set | splits | " + " | ".join(f"bnnpp {m}" for m in methods) + " | VI (pub.) | PBP (pub.) | MC dropout (pub.) | ensemble (pub.) |",
        "|---|---|" + "---|" * (len(methods) + len(pub)),
    ]
    for s in sets:
        n = max(len(by[(s, m)]["splits"]) for m in methods if (s, m) in by)
        pubs = " | ".join(f"{PUBLISHED[s][p][0]:.2f} ± {PUBLISHED[s][p][1]:.2f}" for p in pub)
        lines.append(f"| {s} | {n} | " + " | ".join(cell(by.get((s, m)), "test_ll") for m in methods) + f" | {pubs} |")
    lines += [
        "",
        "## Test RMSE (lower is better)",
        "",
        "| set | " + " | ".join(f"bnnpp {m}" for m in methods) + " | VI (pub.) | PBP (pub.) | MC dropout (pub.) | ensemble (pub.) |",
        "|---|" + "---|" * (len(methods) + len(pub)),
    ]
    for s in sets:
        pubs = " | ".join(f"{PUBLISHED[s][p][2]:.2f} ± {PUBLISHED[s][p][3]:.2f}" for p in pub)
        lines.append(f"| {s} | " + " | ".join(cell(by.get((s, m)), "rmse") for m in methods) + f" | {pubs} |")
    best = result.get("verdict")
    if best:
        lines += ["", "## Against the published numbers (best variational method per set, mean test LL)", ""]
        for s, v in best.items():
            lines.append(f"- {s}: {v['method']} {v['test_ll']:.2f} — beats published VI: {v['beats_vi']}, beats MC dropout: {v['beats_mc_dropout']}")
    lines += [
        "",
        ("Published: VI, PBP and MC dropout from Gal & Ghahramani (2016), Table 1; deep ensembles from "
        "Lakshminarayanan et al. (2017), Table 1 (NLL negated). Their protocols differ in details (epochs, "
        "hyperparameter search, dropout's τ grid); ours is stated above."),
    ]
    return "\n".join(lines) + "\n"


def _verdict(row: dict) -> dict:
    """A set's best variational ``row`` against the published VI and MC dropout test LL."""
    pub = PUBLISHED[row["set"]]
    return {"method": row["method"], "test_ll": row["test_ll"],
            "beats_vi": row["test_ll"] > pub["vi"][0], "beats_mc_dropout": row["test_ll"] > pub["mc_dropout"][0]}


def _assemble(rows, sets, overrides, quick, cmd, seconds, done, likelihoods=LIKELIHOODS):
    verdict = {}
    for name in sets:
        cands = [r for r in rows if r["set"] == name and r["method"] in VARIATIONAL]
        if cands:
            verdict[name] = _verdict(max(cands, key=lambda r: r["test_ll"]))
    return {
        "benchmark": "uci",
        "produced_by": cmd,
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "protocol": (
            "1 hidden layer of 50 ReLU units (100 for protein); inputs and targets standardised on the training split. "
            "The model chosen per split, by the log-likelihood of a 20% validation part of the training split, among the "
            "weight priors N(0,1) and N(0,s²), s~HalfNormal(1) per layer, crossed with the observation noise "
            f"{' and '.join(likelihoods)} (gaussian: one learned sd, HalfNormal(1) on the standardised targets; "
            "heteroscedastic: an sd per row from a second output unit); then refitted on the whole training split. A fit stops at "
            "its first non-finite step and keeps the state before it, as bnnpp.fit does. Methods at their "
            "defaults" + ("" if not overrides else f" except {overrides}") + (" (quick mode: short fits)" if quick else "") + "."
            + ("" if done else " PARTIAL: written after each set and method; the run did not reach the end.")
        ),
        "rows": rows,
        "verdict": verdict,
        "complete": done,
        "seconds": seconds,
    }


#: The standard number of splits per set (Hernández-Lobato & Adams 2015).
STANDARD_SPLITS = {name: (5 if name == "protein" else 20) for name in SETS}


def summarise(paths: list[str]) -> dict:
    """The best variational row per set over the result files ``paths`` (JSON written by this
    script), counting only rows fitted on the set's standard number of splits.

    Returns:
        ``{"benchmark": "uci_summary", "files", "best": {set: row + "file", "protocol"},
        "verdict": {set: {...}}, "beats_vi", "beats_mc_dropout", "sets"}``; the two counts are
        over the sets that have a row.
    """
    import json

    best: dict[str, dict] = {}
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        if result.get("benchmark") != "uci":
            raise ValueError(f"{path} is not a result file of benchmarks/uci.py (its 'benchmark' is {result.get('benchmark')!r})")
        for row in result["rows"]:
            if row["method"] not in VARIATIONAL or len(row["splits"]) != STANDARD_SPLITS[row["set"]]:
                continue
            if row["set"] not in best or row["test_ll"] > best[row["set"]]["test_ll"]:
                best[row["set"]] = {**row, "file": os.path.basename(path), "protocol": result["protocol"],
                                    "likelihoods": sorted(set(row["per_split"].get("likelihood", ["gaussian"])))}
    verdict = {name: _verdict(r) for name, r in best.items()}
    return {
        "benchmark": "uci_summary", "files": [os.path.basename(p) for p in paths], "best": best, "verdict": verdict,
        "beats_vi": sum(v["beats_vi"] for v in verdict.values()),
        "beats_mc_dropout": sum(v["beats_mc_dropout"] for v in verdict.values()), "sets": len(verdict),
    }


def summary_markdown(summary: dict, cmd: str) -> str:
    lines = [
        "# UCI regression: the best variational row per set over result files",
        "",
        (f"`{cmd}`, {dt.date.today().isoformat()}. Files: {', '.join(summary['files'])}. Rows on the standard splits only "
         "(20; 5 for protein); each row's protocol is in its file."),
        "",
        "| set | method | test LL | RMSE | noise models chosen | file | VI (pub.) | MC dropout (pub.) | > VI | > MC dropout |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in SETS:
        r = summary["best"].get(name)
        if r is None:
            continue
        v = summary["verdict"][name]
        lines.append(
            f"| {name} | {r['method']} | {r['test_ll']:.2f} ± {r['test_ll_se']:.2f} | {r['rmse']:.2f} ± {r['rmse_se']:.2f} | "
            f"{', '.join(r['likelihoods'])} | {r['file']} | {PUBLISHED[name]['vi'][0]:.2f} ± {PUBLISHED[name]['vi'][1]:.2f} | "
            f"{PUBLISHED[name]['mc_dropout'][0]:.2f} ± {PUBLISHED[name]['mc_dropout'][1]:.2f} | "
            f"{'yes' if v['beats_vi'] else 'no'} | {'yes' if v['beats_mc_dropout'] else 'no'} |"
        )
    lines += ["", (f"Ahead of the published mean-field VI on {summary['beats_vi']} of {summary['sets']} sets and of the "
                   f"published MC dropout on {summary['beats_mc_dropout']} of {summary['sets']} (mean test LL over splits).")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("BNNPP_DATA_DIR"), help="folder holding the UCI sets (or uci/)")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated sets")
    ap.add_argument("--methods", default="map,advi,bbb,nuts", help="comma-separated registered methods")
    ap.add_argument("--nuts-sets", default=",".join(NUTS_SETS), help="sets on which nuts runs (it is slow)")
    ap.add_argument("--splits", type=int, default=None, help="first K splits only (default: all)")
    ap.add_argument("--set", dest="sets_opts", action="append", default=[], metavar="METHOD.OPTION=VALUE",
                    help="override one method option (JSON value), repeatable")
    ap.add_argument("--likelihoods", default=",".join(LIKELIHOODS),
                    help=f"comma-separated observation models of the validation grid (from {', '.join(LIKELIHOODS)})")
    ap.add_argument("--quick", action="store_true", help="2 splits, short fits (a smoke test, not a result)")
    ap.add_argument("--summary", default=None, metavar="FILES",
                    help="comma-separated result JSONs of this script: write the best variational row per set and the verdict; fits nothing")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="suffix of the result file names")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    import json

    cmd = ("python benchmarks/uci.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    if args.summary is not None:
        paths = [p for p in args.summary.split(",") if p]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing or not paths:
            raise SystemExit(f"--summary: no such result file(s) {', '.join(missing) or '(none given)'}; pass comma-separated uci*.json paths")
        try:
            summary = summarise(paths)
        except (ValueError, KeyError) as err:
            raise SystemExit(f"--summary: {err}") from None
        md = summary_markdown(summary, cmd)
        write_results(args.results, "uci" + (f"_{args.tag}" if args.tag else "_summary"), summary, md)
        print(md)
        return summary

    import bnnpp

    if not args.data_dir:
        raise SystemExit("pass --data-dir (the folder holding the UCI sets, e.g. ../shared/data) or set BNNPP_DATA_DIR")
    sets = [s for s in args.sets.split(",") if s]
    bad = [s for s in sets if s not in SETS]
    if bad or not sets:
        raise SystemExit(f"unknown or no set(s) {', '.join(bad)}; choose from {', '.join(SETS)}")
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in bnnpp.inference.registered()]
    if unknown or not methods:
        raise SystemExit(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(bnnpp.inference.registered())}")
    overrides: dict[str, dict] = {}
    for text in args.sets_opts:
        lhs, _, value = text.partition("=")
        m, _, opt = lhs.partition(".")
        try:
            overrides.setdefault(m, {})[opt] = json.loads(value)
        except json.JSONDecodeError:
            overrides.setdefault(m, {})[opt] = value
    likelihoods = tuple(v for v in args.likelihoods.split(",") if v)
    if not likelihoods or any(v not in LIKELIHOODS for v in likelihoods):
        raise SystemExit(f"--likelihoods: choose from {', '.join(LIKELIHOODS)} (got {args.likelihoods!r})")
    nuts_sets = set(args.nuts_sets.split(","))
    name_out = "uci" + (f"_{args.tag}" if args.tag else "")
    rows = []
    t_all = time.perf_counter()
    for name in sets:
        n_splits = bnnpp.data.uci_num_splits(name, args.data_dir)
        k = min(n_splits, 2 if args.quick else (args.splits or n_splits))
        for m in methods:
            if m == "nuts" and name not in nuts_sets:
                continue
            options = {**(QUICK.get(m, {}) if args.quick else {}), **overrides.get(m, {})}
            row = run_set(name, m, list(range(k)), args.data_dir, options, args.seed, likelihoods)
            rows.append(row)
            print(f"{name:9s} {m:6s} test LL {row['test_ll']:7.3f} ± {row['test_ll_se'] or 0:.3f}  RMSE {row['rmse']:.3f}  "
                  f"({k} splits, {row['seconds']:.0f} s; models {dict(Counter(row['per_split']['prior']))}; "
                  f"stopped early: {int(np.sum(np.asarray(row['per_split']['stopped_at']) >= 0))} test, {sum(row['val_stopped'].values())} validation fits)", flush=True)
            partial = _assemble(rows, sets, overrides, args.quick, cmd, time.perf_counter() - t_all, False, likelihoods)
            write_results(args.results, name_out, partial, markdown(partial))
    result = _assemble(rows, sets, overrides, args.quick, cmd, time.perf_counter() - t_all, True, likelihoods)
    md = markdown(result)
    write_results(args.results, name_out, result, md)
    print(md)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
