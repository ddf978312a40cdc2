"""``bnnpp fit``: fit a network to a dataset and write posterior.nc, metrics.json and
uncertainty.png into ``--out``."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

import bnnpp
from bnnpp import metrics, priors
from bnnpp.cli._errors import CLIError
from bnnpp.inference.base import check_data, get_backend, registered

# CLI flag → backend option name; only flags the user gives are passed on, so a flag that the
# chosen method does not take is reported by the backend as an error instead of ignored.
METHOD_FLAGS = {
    "steps": "num_steps",
    "learning_rate": "learning_rate",
    "num_particles": "num_particles",
    "guide": "guide",
    "num_samples": "num_samples",
}


def _hidden(text: str) -> tuple[int, ...]:
    if text.strip() in ("", "none"):
        return ()
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hidden takes comma-separated widths such as 5,5, got {text!r}") from None


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers such as 1,1, got {text!r}") from None


def add_parser(sub) -> None:
    p = sub.add_parser(
        "fit",
        help="fit a Bayesian network and write posterior.nc, metrics.json, uncertainty.png",
        description="Fit a Bayesian MLP to a built-in dataset; write DIR/posterior.nc (ArviZ netCDF), "
        "DIR/metrics.json (test metrics and timings) and DIR/uncertainty.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("data")
    g.add_argument("--data", default="moons", choices=sorted(bnnpp.data.SYNTHETIC), help="built-in dataset (generated locally)")
    g.add_argument("--data-noise", type=float, default=None, help="noise of the generated data (default: the dataset's: moons 0.3, circles 0.2, sinusoid 1.0)")
    g = p.add_argument_group("model")
    g.add_argument("--hidden", type=_hidden, default=(5, 5), help="hidden layer widths, comma-separated (e.g. 5,5)")
    g.add_argument("--activation", default="tanh", choices=sorted(bnnpp.models.ACTIVATIONS), help="hidden activation")
    g.add_argument("--prior", default="normal", choices=list(priors.PRIORS), help="weight prior family")
    g.add_argument(
        "--hyperprior",
        default="inverse-gamma",
        choices=["fixed", *priors.HYPERPRIORS],
        help="prior on each layer's scale (inverse-gamma is on the variance); 'fixed' uses --scale",
    )
    g.add_argument("--hyperprior-params", type=_floats, default=None, help="hyperprior parameters: s for half-normal/half-cauchy, a,b for inverse-gamma (default 1 / 1,1)")
    g.add_argument("--scale", type=float, default=1.0, help="the fixed prior scale when --hyperprior fixed")
    g.add_argument("--per", default="layer", choices=["layer", "network", "unit"], help="scope of a sampled scale")
    g.add_argument("--obs-noise", type=float, default=None, help="regression: fix the observation sd (default: learn it)")
    g = p.add_argument_group("inference (each flag is passed to the method; one it does not take is an error)")
    g.add_argument("--method", default="advi", choices=list(registered()), help="inference method")
    g.add_argument("--steps", type=int, default=None, help="optimisation steps (advi default 10000)")
    g.add_argument("--learning-rate", type=float, default=None, help="Adam learning rate (advi default 0.01)")
    g.add_argument("--num-particles", type=int, default=None, help="Monte-Carlo samples per ELBO estimate (default 1)")
    g.add_argument("--guide", default=None, choices=["normal", "lowrank", "fullrank"], help="variational family (default normal = mean-field)")
    g.add_argument("--num-samples", type=int, default=None, help="posterior draws kept (default 1000)")
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=0, help="seed for data generation and inference")
    g.add_argument("--out", required=True, help="output folder (created; the three files are replaced)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--no-cache", action="store_true", help="do not use JAX's persistent compilation cache")
    p.set_defaults(handler=run)


def _build(args) -> tuple[Any, Any, dict]:
    """Everything that can fail on user input, before any compilation."""
    if args.seed < 0:
        raise ValueError(f"--seed must be ≥ 0, got {args.seed}")
    data_kwargs = {} if args.data_noise is None else {"noise": args.data_noise}
    dataset = bnnpp.data.load_synthetic(args.data, seed=args.seed, **data_kwargs)
    if args.hyperprior == "fixed":
        if args.hyperprior_params is not None:
            raise ValueError("--hyperprior-params needs a hyperprior; with --hyperprior fixed use --scale")
        scale: Any = args.scale
    else:
        scale = priors.hyperprior(args.hyperprior, *(args.hyperprior_params or ()))
    prior = priors.prior(args.prior, scale, per=args.per)
    if dataset.task == "classification":
        model = bnnpp.models.mlp(args.hidden, activation=args.activation, likelihood="categorical", num_classes=dataset.num_classes, prior=prior)
        if args.obs_noise is not None:
            raise ValueError("--obs-noise applies to regression data (sinusoid) only")
    else:
        model = bnnpp.models.mlp(args.hidden, activation=args.activation, likelihood="gaussian", noise=args.obs_noise, prior=prior)
    options = {opt: getattr(args, flag) for flag, opt in METHOD_FLAGS.items() if getattr(args, flag) is not None}
    get_backend(args.method).check_options(options)
    check_data(dataset, model)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out} is a file: give a folder path")
    return dataset, model, options


def evaluate(posterior, dataset) -> dict:
    """Test-set metrics of a posterior as a dict (classification or regression)."""
    pred = posterior.predict(dataset.x_test)
    y = dataset.y_test
    if pred.task == "classification":
        return {
            "accuracy": metrics.accuracy(pred.mean, y),
            "nll": metrics.nll(pred.mean, y),
            "brier": metrics.brier(pred.mean, y),
            "ece": metrics.ece(pred.mean, y),
            "mean_entropy": float(pred.entropy.mean()),
            "mean_mutual_information": float(pred.mutual_information.mean()),
            "mean_expected_error_rate": float(pred.expected_error_rate.mean()),
        }
    return {
        "rmse": metrics.rmse(pred.mean, y),
        "nll": metrics.gaussian_nll(pred.draws, pred.noise, y),
        "coverage_95": metrics.interval_coverage(pred.mean, pred.std, y),
        "mean_epistemic_std": float(pred.epistemic_std.mean()),
        "mean_aleatoric_std": float(pred.aleatoric_std.mean()),
    }


def figure(posterior, dataset):
    """The uncertainty figure for a dataset: decision map (2-D classification) or bands."""
    from bnnpp import plots

    title = f"{dataset.name}: {posterior.info['method']}"
    if dataset.task == "classification" and dataset.x_train.shape[1] == 2:
        return plots.decision_map(posterior.predict, dataset.x_train, dataset.y_train, title=title)
    grid = np.sort(dataset.x_test, axis=0)
    return plots.regression_bands(posterior.predict(grid), grid, dataset.x_train, dataset.y_train, title=title)


def fit_and_report(args) -> dict:
    """Run ``bnnpp fit`` from parsed arguments; returns the metrics dict also written to disk."""
    try:
        dataset, model, options = _build(args)
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None
    if not args.no_cache:
        cache = os.environ.get("BNNPP_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "bnnpp", "jax"))
        import jax

        jax.config.update("jax_compilation_cache_dir", cache)
        # cache every program, not only those over JAX's default 1 s: a warm start loads them all
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    t0 = time.perf_counter()
    post = bnnpp.fit(model, dataset, method=args.method, seed=args.seed, progress=not args.quiet, **options)
    fit_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    test = evaluate(post, dataset)
    predict_seconds = time.perf_counter() - t0
    report = {
        "data": args.data,
        "method": args.method,
        "model": model.spec(),
        "options": {k: v for k, v in post.info["options"].items() if k != "optimizer"},
        "seed": args.seed,
        "steps_run": post.info.get("steps_run"),
        "stopped_at": post.info.get("stopped_at"),
        "test": test,
        "seconds": {
            "import": bnnpp.IMPORT_SECONDS,
            "compile": post.info["compile_seconds"],
            "fit": fit_seconds,
            "predict": predict_seconds,
        },
    }
    # Write everything into a temporary folder first, then move it into place: a failure
    # leaves no partial output.
    parent = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".bnnpp-", dir=parent)
    try:
        t0 = time.perf_counter()
        post.save(os.path.join(tmp, "posterior.nc"))
        fig = figure(post, dataset)
        fig.savefig(os.path.join(tmp, "uncertainty.png"), dpi=110)
        report["seconds"]["write"] = time.perf_counter() - t0
        with open(os.path.join(tmp, "metrics.json"), "w") as f:
            json.dump(report, f, indent=2, default=str)
        os.makedirs(args.out, exist_ok=True)
        for name in ("posterior.nc", "uncertainty.png", "metrics.json"):
            os.replace(os.path.join(tmp, name), os.path.join(args.out, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def run(args) -> int:
    t0 = time.perf_counter()
    report = fit_and_report(args)
    test = report["test"]
    headline = (
        f"test accuracy {test['accuracy']:.3f}, NLL {test['nll']:.3f}, ECE {test['ece']:.3f}"
        if "accuracy" in test
        else f"test RMSE {test['rmse']:.3f}, NLL {test['nll']:.3f}, 95% coverage {test['coverage_95']:.2f}"
    )
    s = report["seconds"]
    print(f"{report['data']} / {report['method']}: {headline}")
    print(
        f"seconds: import {s['import']:.1f}, compile {s['compile']:.1f}, fit {s['fit']:.1f} (compile included), "
        f"predict {s['predict']:.1f}, write {s['write']:.1f}, command {time.perf_counter() - t0 + s['import']:.1f}"
    )
    print(f"wrote {os.path.join(args.out, 'posterior.nc')}, metrics.json, uncertainty.png")
    return 0
