"""``bnnpp fit``: fit a network to a dataset and write posterior.nc, metrics.json and a figure
(uncertainty.png for the built-in 2-D and 1-D sets, loss.png for images) into ``--out``.

For MNIST / Fashion-MNIST (``--data mnist``), ``metrics.json`` records how to reload the same
data (``data``, ``data_dir``, ``normalize``, ``validation``, ``train_subset``, ``flatten``):
:func:`load_dataset_from_report` rebuilds the :class:`~bnnpp.data.Dataset` from it, since
``posterior.nc`` does not hold training sets that large.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from bnnpp.data import IMAGE_SETS, NORMALIZATIONS, SYNTHETIC
from bnnpp.inference.base import Prediction, check_data, get_backend, registered

MODELS = ("mlp", "cnn", "lenet5")
#: Posterior draws kept by default for image data: a large net stores its variational
#: parameters (``info["guide_params"]``) plus this modest number of draws, enough for test
#: metrics and uncertainty (the seed study used 100) without a file of 1000 copies of the net.
IMAGE_NUM_SAMPLES = 100
MIN_TEST_DRAWS = 10

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
        help="fit a Bayesian network and write posterior.nc, metrics.json and a figure",
        description="Fit a Bayesian network to a built-in dataset or MNIST / Fashion-MNIST; write "
        "DIR/posterior.nc (ArviZ netCDF), DIR/metrics.json (test metrics, timings and how to reload the data) "
        "and DIR/uncertainty.png (2-D and 1-D sets) or DIR/loss.png (images). For images the posterior keeps "
        f"the variational parameters and {IMAGE_NUM_SAMPLES} draws by default (--num-samples).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("data")
    g.add_argument("--data", default="moons", choices=[*sorted(SYNTHETIC), *IMAGE_SETS], help="built-in dataset (generated locally) or MNIST / Fashion-MNIST (read from local files)")
    g.add_argument("--data-noise", type=float, default=None, help="noise of the generated data (default: the dataset's: moons 0.3, circles 0.2, sinusoid 1.0)")
    g.add_argument("--data-dir", default=None, help="mnist/fashion_mnist: folder with the four IDX .gz files, or its parent (default: a tensorflow-datasets copy prepared in $TFDS_DATA_DIR or ~/tensorflow_datasets, else $BNNPP_DATA_DIR/<data>)")
    g.add_argument("--normalize", default=None, choices=list(NORMALIZATIONS), help="mnist/fashion_mnist pixels: /255, /126 (Blundell et al.) or standardised with the training mean and sd (default 255)")
    g.add_argument("--validation", type=int, default=None, help="mnist/fashion_mnist: last N training images held out for validation (default 10000; 0 for none)")
    g.add_argument("--train-subset", type=int, default=None, help="mnist/fashion_mnist: train on the first N training images only")
    g = p.add_argument_group("model")
    g.add_argument("--model", default="mlp", choices=list(MODELS), help="network: MLP, or for mnist/fashion_mnist the convolutional cnn / lenet5")
    g.add_argument("--hidden", type=_hidden, default=None, help="MLP hidden layer widths, comma-separated (default 5,5; 400,400 for mnist/fashion_mnist)")
    g.add_argument("--activation", default=None, choices=sorted(bnnpp.models.ACTIVATIONS), help="hidden activation (default tanh; relu for an MLP on mnist/fashion_mnist; cnn tanh, lenet5 relu)")
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
    g.add_argument("--out", required=True, help="output folder (created; the files written are replaced)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--no-cache", action="store_true", help="do not use JAX's persistent compilation cache")
    p.set_defaults(handler=run)


def _data_record(args) -> dict:
    """How to load (and later reload) this run's data; checks the data flags against --data."""
    image_flags = [
        flag
        for flag, value in (("--data-dir", args.data_dir), ("--normalize", args.normalize), ("--validation", args.validation), ("--train-subset", args.train_subset))
        if value is not None
    ]
    if args.data in IMAGE_SETS:
        if args.data_noise is not None:
            raise ValueError("--data-noise applies to the generated data (moons, circles, sinusoid) only")
        if args.train_subset is not None and args.train_subset < 1:
            raise ValueError(f"--train-subset must be ≥ 1 (the first N training images), got {args.train_subset}")
        return {
            "data": args.data,
            "data_dir": None if args.data_dir is None else os.path.abspath(args.data_dir),
            "normalize": args.normalize or "255",
            "validation": 10000 if args.validation is None else args.validation,
            "train_subset": args.train_subset,
            "flatten": args.model == "mlp",
        }
    if image_flags:
        verb = "applies" if len(image_flags) == 1 else "apply"
        raise ValueError(f"{', '.join(image_flags)} {verb} to mnist/fashion_mnist only, not to --data {args.data}")
    if args.model != "mlp":
        raise ValueError(f"--model {args.model} takes 28×28 images: use --data mnist or fashion_mnist, or --model mlp")
    return {"data": args.data, "data_noise": args.data_noise, "seed": args.seed}


def load_dataset_from_report(report: dict) -> bnnpp.data.Dataset:
    """Reload the dataset of a ``bnnpp fit`` run from its ``metrics.json`` dict.

    Uses the keys ``data`` and, for mnist/fashion_mnist, ``data_dir`` (``None``: the default
    search of :func:`bnnpp.data.load`), ``normalize``, ``validation``, ``flatten`` and
    ``train_subset``; for the generated sets ``data_noise`` and ``seed``.

    Returns:
        The :class:`bnnpp.data.Dataset` the run trained and was tested on (training split cut
        to ``train_subset`` rows when set). Raises ValueError when the data cannot be found.
    """
    name = report.get("data")
    if name in IMAGE_SETS:
        ds = bnnpp.data.load(
            name,
            report.get("data_dir"),
            normalize=report.get("normalize", "255"),
            validation=report.get("validation", 10000),
            flatten=bool(report.get("flatten", False)),
        )
        subset = report.get("train_subset")
        if subset is not None:
            if subset > len(ds.x_train):
                raise ValueError(f"--train-subset {subset} exceeds the {len(ds.x_train)} training images; use at most {len(ds.x_train)}")
            ds = dataclasses.replace(ds, x_train=ds.x_train[:subset], y_train=ds.y_train[:subset])
        return ds
    if name in SYNTHETIC:
        noise = report.get("data_noise")
        return bnnpp.data.load_synthetic(name, seed=report.get("seed", 0), **({} if noise is None else {"noise": noise}))
    raise ValueError(f"the report names no known dataset (data={name!r}); known: {', '.join([*SYNTHETIC, *IMAGE_SETS])}")


def _model(args, prior, task: str, num_classes: int | None):
    """The network of --model with the CLI's defaults (MLP widths and activation per data kind)."""
    image = args.data in IMAGE_SETS
    if args.model != "mlp":
        if args.hidden is not None:
            raise ValueError(f"--hidden sets MLP widths; --model {args.model} has a fixed architecture (bnnpp.models.ARCHITECTURES)")
        build = getattr(bnnpp.models, args.model, None)
        if build is None:
            raise ValueError(f"--model {args.model} needs bnnpp.models.{args.model}, which this install lacks; use --model mlp")
        return build(prior=prior, num_classes=num_classes, activation=args.activation)
    hidden = args.hidden if args.hidden is not None else ((400, 400) if image else (5, 5))
    activation = args.activation or ("relu" if image else "tanh")
    if task == "classification":
        return bnnpp.models.mlp(hidden, activation=activation, likelihood="categorical", num_classes=num_classes, prior=prior)
    return bnnpp.models.mlp(hidden, activation=activation, likelihood="gaussian", noise=args.obs_noise, prior=prior)


def _build(args) -> tuple[Any, Any, dict, dict]:
    """Everything that can fail on user input, before any compilation: returns the dataset,
    the model, the inference options and the data record for metrics.json."""
    if args.seed < 0:
        raise ValueError(f"--seed must be ≥ 0, got {args.seed}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out} is a file: give a folder path")
    record = _data_record(args)
    image = args.data in IMAGE_SETS
    if args.hyperprior == "fixed":
        if args.hyperprior_params is not None:
            raise ValueError("--hyperprior-params needs a hyperprior; with --hyperprior fixed use --scale")
        scale: Any = args.scale
    else:
        scale = priors.hyperprior(args.hyperprior, *(args.hyperprior_params or ()))
    prior = priors.prior(args.prior, scale, per=args.per)
    backend = get_backend(args.method)
    given = [(dest, opt) for dest, opt, _ in METHOD_FLAGS if hasattr(args, dest)]
    wrong = [_flag(dest) for dest, opt in given if opt not in backend.defaults]
    if wrong:
        takes = [_flag(dest) for dest, opt, _ in METHOD_FLAGS if opt in backend.defaults]
        raise ValueError(
            f"{', '.join(wrong)} does not apply to --method {args.method}; it takes {', '.join(takes)}"
        )
    options = {opt: getattr(args, dest) for dest, opt in given}
    if image and "num_samples" in backend.defaults:
        options.setdefault("num_samples", IMAGE_NUM_SAMPLES)
        if options["num_samples"] < MIN_TEST_DRAWS:
            raise ValueError(f"--num-samples {options['num_samples']} is too few for test metrics on images: use at least {MIN_TEST_DRAWS}")
    backend.check_options(options)
    if image:
        if args.obs_noise is not None:
            raise ValueError("--obs-noise applies to regression data (sinusoid) only")
        model = _model(args, prior, "classification", 10)
        dataset = load_dataset_from_report(record)  # reads the files: after every flag check
        if record["validation"] and "validation_data" in backend.defaults:
            options["validation_data"] = (dataset.x_val, dataset.y_val)
    else:
        data_kwargs = {} if args.data_noise is None else {"noise": args.data_noise}
        dataset = bnnpp.data.load_synthetic(args.data, seed=args.seed, **data_kwargs)
        if dataset.task == "classification" and args.obs_noise is not None:
            raise ValueError("--obs-noise applies to regression data (sinusoid) only")
        model = _model(args, prior, dataset.task, dataset.num_classes)
    merged = backend.check_options(options)
    x, y = check_data(dataset, model)
    if backend.validate_data is not None:
        backend.validate_data(merged, x, y)
    return dataset, model, options, record


def block_rows(posterior, x: np.ndarray, max_values: int = 1 << 22) -> int:
    """Rows of ``x`` to predict per call so that draws × rows × input values stays under
    ``max_values`` (4M floats: bounded memory also for 100 draws of a convolutional net)."""
    per_row = posterior.num_chains * posterior.num_draws * int(np.prod(np.shape(x)[1:]))
    return max(1, min(len(x), max_values // max(per_row, 1)))


def evaluate(posterior, dataset) -> dict:
    """Test-set metrics of a posterior as a dict (classification or regression), from every
    posterior draw (``num_draws`` in the dict); classifiers predict in blocks of
    :func:`block_rows` rows."""
    y = dataset.y_test
    if dataset.task == "classification":
        from bnnpp.evaluation import predict_probs

        probs = predict_probs(posterior, dataset.x_test, batch_size=block_rows(posterior, dataset.x_test))
        pred = Prediction("classification", probs=probs)
        return {**pred.scores(y), "num_draws": int(probs.shape[0])}
    pred = posterior.predict(dataset.x_test)
    return {
        "rmse": metrics.rmse(pred.mean, y),
        "nll": metrics.gaussian_nll(pred.draws, pred.noise, y),
        "coverage_95": metrics.interval_coverage(pred.mean, pred.std, y),
        "mean_epistemic_std": float(pred.epistemic_std.mean()),
        "mean_aleatoric_std": float(pred.aleatoric_std.mean()),
        "num_draws": int(pred.draws.shape[0]),
    }


def loss_figure(posterior, title: str = ""):
    """The training loss per step (``info["loss"]``; for bbb also the data term and the KL),
    or ``None`` when the method keeps no loss trace (nuts, sgld)."""
    from matplotlib.figure import Figure

    info = posterior.info
    if "loss" not in info or len(np.asarray(info["loss"])) == 0:
        return None
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    for key, label in (("loss", "loss (minibatch objective)"), ("nll", "data term (NLL, rescaled)"), ("kl", "KL")):
        if key in info:
            ax.plot(np.arange(1, len(info[key]) + 1), np.asarray(info[key]), lw=0.8, label=label)
    ax.set_xlabel("step")
    ax.set_yscale("symlog")
    ax.legend()
    ax.set_title(title or info.get("method", ""))
    return fig


def figure(posterior, dataset):
    """The figure of a run and its file name: the decision map (2-D classification) or the
    regression bands as ``uncertainty.png``; for images the loss curve as ``loss.png`` (or
    ``(None, None)`` when the method keeps no loss trace)."""
    from bnnpp import plots

    title = f"{dataset.name}: {posterior.info['method']}"
    if dataset.x_train.ndim != 2 or (dataset.task == "classification" and dataset.x_train.shape[1] != 2):
        return loss_figure(posterior, title), "loss.png"
    if dataset.task == "classification":
        return plots.decision_map(posterior.predict, dataset.x_train, dataset.y_train, title=title), "uncertainty.png"
    grid = np.sort(dataset.x_test, axis=0)
    return plots.regression_bands(posterior.predict(grid), grid, dataset.x_train, dataset.y_train, title=title), "uncertainty.png"


def _last(trace) -> float | None:
    """The final entry of a per-chunk trace such as ``info["val_error"]``, or None if empty."""
    trace = np.asarray(trace, dtype=float).reshape(-1)
    return float(trace[-1]) if trace.size else None


def fit_and_report(args) -> dict:
    """Run ``bnnpp fit`` from parsed arguments; returns the metrics dict also written to disk."""
    try:
        dataset, model, options, record = _build(args)
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
        **record,
        "method": args.method,
        "model": model.spec(),
        "options": {k: v for k, v in post.info["options"].items() if k not in ("optimizer", "validation_data")},
        "seed": args.seed,
        "steps_run": post.info.get("steps_run"),
        "stopped_at": post.info.get("stopped_at"),
        "test": test,
        "fit_info": {k: post.info[k] for k in ("divergences", "num_batches", "learned_prior", "num_parameters") if k in post.info},
        **({"val_error": _last(post.info.get("val_error"))} if post.info.get("val_error") is not None else {}),
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
        fig, fig_name = figure(post, dataset)
        written = ["posterior.nc", "metrics.json"]
        if fig is not None:
            fig.savefig(os.path.join(tmp, fig_name), dpi=110)
            written.append(fig_name)
        report["seconds"]["write"] = time.perf_counter() - t0
        report["files"] = written
        with open(os.path.join(tmp, "metrics.json"), "w") as f:
            json.dump(report, f, indent=2, default=str)
        os.makedirs(args.out, exist_ok=True)
        for name in written:
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
    print(f"wrote {os.path.join(args.out, report['files'][0])}, {', '.join(report['files'][1:])}")
    return 0
