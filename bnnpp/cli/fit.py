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

# Every inference flag: (dest, backend option, argparse kwargs). Only flags the user gives are
# passed on; a flag whose option the chosen method does not take is an error naming the flags
# it does take. The help text lists the methods that take each flag (read from the registry).
METHOD_FLAGS: list[tuple[str, str, dict]] = [
    ("steps", "num_steps", {"type": int, "help": "optimisation steps"}),
    ("epochs", "epochs", {"type": int, "help": "passes over the training data"}),
    ("batch_size", "batch_size", {"type": int, "help": "minibatch rows per step"}),
    ("learning_rate", "learning_rate", {"type": float, "help": "Adam learning rate"}),
    ("num_particles", "num_particles", {"type": int, "help": "Monte-Carlo samples per ELBO estimate"}),
    ("guide", "guide", {"choices": ["normal", "lowrank", "fullrank"], "help": "variational family (normal = mean-field)"}),
    ("init_scale", "init_scale", {"type": float, "help": "initial sd of the variational factors"}),
    ("init_loc", "init_loc", {"choices": ["glorot", "uniform"], "help": "initial variational means"}),
    ("init_radius", "init_radius", {"type": float, "help": "start values uniform in (-r, r) on the unconstrained space"}),
    ("kl", "kl", {"choices": ["analytic", "mc"], "help": "closed-form KL where prior and q are Gaussian, or Monte-Carlo"}),
    ("kl_weighting", "kl_weighting", {"choices": ["uniform", "blundell"], "help": "KL weight per minibatch: 1/M or 2^(M-i)/(2^M-1)"}),
    ("estimator", "estimator", {"choices": ["reparam", "local", "flipout"], "help": "gradient estimator for dense layers"}),
    ("learn_prior", "learn_prior", {"action": "store_const", "const": True, "help": "train the scale mixture's pi, sigma1, sigma2"}),
    ("num_samples", "num_samples", {"type": int, "help": "posterior draws kept (per chain for MCMC)"}),
    ("num_chains", "num_chains", {"type": int, "help": "independent chains"}),
    ("num_warmup", "num_warmup", {"type": int, "help": "NUTS warm-up (adaptation) iterations per chain"}),
    ("target_accept_prob", "target_accept_prob", {"type": float, "help": "NUTS target acceptance probability"}),
    ("max_tree_depth", "max_tree_depth", {"type": int, "help": "NUTS maximum tree depth"}),
    ("chain_method", "chain_method", {"choices": ["vectorized", "parallel", "sequential"], "help": "how NUTS runs its chains"}),
    ("variant", "variant", {"choices": ["sgld", "psgld", "sghmc"], "help": "stochastic-gradient MCMC variant"}),
    ("step_size", "step_size", {"type": float, "help": "SG-MCMC base step size"}),
    ("schedule", "schedule", {"choices": ["constant", "polynomial", "cyclical"], "help": "SG-MCMC step-size schedule"}),
    ("num_cycles", "num_cycles", {"type": int, "help": "cycles of the cyclical schedule"}),
    ("decay_steps", "decay_steps", {"type": float, "help": "polynomial schedule: h0 (1 + t/decay_steps)^-gamma"}),
    ("gamma", "gamma", {"type": float, "help": "polynomial schedule exponent, in (0.5, 1]"}),
    ("exploration", "exploration", {"type": float, "help": "cyclical schedule: share of each cycle without noise"}),
    ("num_integration_steps", "num_integration_steps", {"type": int, "help": "SGHMC steps per transition"}),
    ("friction", "friction", {"type": float, "help": "SGHMC friction"}),
    ("rms_decay", "rms_decay", {"type": float, "help": "pSGLD RMSprop decay"}),
    ("rms_eps", "rms_eps", {"type": float, "help": "pSGLD RMSprop epsilon"}),
    ("dense_mass", "dense_mass", {"action": "store_const", "const": True, "help": "NUTS: adapt a dense mass matrix"}),
    ("noncentered", "noncentered", {"action": "store_const", "const": True, "help": "NUTS: sample location-scale weights as loc + scale * z"}),
    ("burn_in", "burn_in", {"type": int, "help": "SG-MCMC steps discarded before keeping draws"}),
    ("thinning", "thinning", {"type": int, "help": "keep every k-th SG-MCMC step"}),
]


def _takers(option: str) -> str:
    """The methods that take ``option``, with their defaults: ``"advi=10000, map=5000"``."""
    out = []
    for m in registered():
        defaults = get_backend(m).defaults
        if option in defaults:
            d = defaults[option]
            out.append(m if isinstance(d, bool) else f"{m}={'full batch' if d is None and option == 'batch_size' else d}")
    return ", ".join(out) or "no method"


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


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
    g = p.add_argument_group(
        "inference",
        "Every flag is passed to the chosen --method; a flag the method does not take is an error. "
        "Unset flags keep the method's default; [brackets] list the methods that take a flag, with "
        "their defaults.",
    )
    g.add_argument("--method", default="advi", choices=list(registered()), help="inference method")
    for dest, option, kwargs in METHOD_FLAGS:
        kwargs = dict(kwargs)
        kwargs["help"] = f"{kwargs['help']} [{_takers(option)}]"
        g.add_argument(_flag(dest), dest=dest, default=argparse.SUPPRESS, **kwargs)
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
    backend = get_backend(args.method)
    given = [(dest, opt) for dest, opt, _ in METHOD_FLAGS if hasattr(args, dest)]
    wrong = [_flag(dest) for dest, opt in given if opt not in backend.defaults]
    if wrong:
        takes = [_flag(dest) for dest, opt, _ in METHOD_FLAGS if opt in backend.defaults]
        raise ValueError(
            f"{', '.join(wrong)} does not apply to --method {args.method}; it takes {', '.join(takes)}"
        )
    options = {opt: getattr(args, dest) for dest, opt in given}
    merged = backend.check_options(options)
    x, y = check_data(dataset, model)
    if backend.validate_data is not None:
        backend.validate_data(merged, x, y)
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
        "fit_info": {k: post.info[k] for k in ("divergences", "num_batches", "learned_prior", "num_parameters") if k in post.info},
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
