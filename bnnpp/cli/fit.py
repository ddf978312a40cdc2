"""``bnnpp fit``: fit a network to a dataset and write posterior.nc, metrics.json, config.toml and
a figure (uncertainty.png for 2-D classification and 1-D regression, else loss.png) into ``--out``.

``--data`` is a built-in set or a user's ``.csv``/``.npz`` (:func:`bnnpp.data.from_file`): its
data record holds the file's absolute path and SHA-256 plus ``target``, ``task``,
``test_fraction`` and ``seed`` (the file is read again to reload the run, and refused if it
changed), and ``preprocessing`` — the standardisation ``bnnpp predict`` applies to new rows.

For MNIST / Fashion-MNIST (``--data mnist``), ``metrics.json`` records how to reload the same
data (``data``, ``data_dir``, ``normalize``, ``validation``, ``train_subset``, ``flatten``):
:func:`bnnpp.runs.dataset_from_record` rebuilds the :class:`~bnnpp.data.Dataset` from it, since
``posterior.nc`` does not hold training sets that large. The run folder is written by
:mod:`bnnpp.runs`; this module parses the flags and prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
import time
import warnings
import zipfile
from typing import Any

import jax
import numpy as np

import bnnpp
from bnnpp import config, distributed, files, priors, runs
from bnnpp.cli._data import add_file_flags, check_builtin, check_file, file_record, is_file_data
from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce
from bnnpp.data import IMAGE_SETS, NORMALIZATIONS, SYNTHETIC
from bnnpp.inference import check_data, get_backend, registered
from bnnpp.inference.checkpoints import TrainingInterrupted
from bnnpp.inference.checkpoints import remove as remove_checkpoints
from bnnpp.inference.registry import command_line_options
from bnnpp.inference.sharding import check_request, global_rows, process_share
from bnnpp.introspection import check_model, num_parameters
from bnnpp.posterior import MAX_SAVED_DATA

MODELS = ("mlp", "cnn", "lenet5")
EXIT_NAN_STOP = 3
"""Exit status of a fit that stopped early on a NaN/inf (its run folder is still written)."""
def checkpoint_folder(out: str) -> str:
    """Where an unfinished fit to ``out`` keeps its checkpoints: ``.NAME.checkpoints`` beside
    the real run folder (a symbolic link ``out`` resolved, so that every name of one folder
    shares its checkpoints), so that the run folder itself only ever changes by a whole-folder
    publish."""
    parent, name = os.path.split(os.path.realpath(os.path.abspath(out)))
    return os.path.join(parent, f".{name}.checkpoints")


def has_checkpoint(folder: str) -> bool:
    """Whether ``folder`` holds a checkpoint to resume from (an orbax step folder)."""
    return os.path.isdir(folder) and any(name.isdigit() for name in os.listdir(folder))
#: Posterior draws kept by default for image data: a large net stores its variational
#: parameters (``info["guide_params"]``) plus this modest number of draws, enough for test
#: metrics and uncertainty (Zharikov, Isachenko & Bochkarev used 100) without a file of 1000 copies of the net.
IMAGE_NUM_SAMPLES = 100
MIN_TEST_DRAWS = 10

def _shown_default(option: str, default) -> str:
    """A method's default in the flag help: ``None`` spelt out where it has a meaning."""
    if default is None:
        return {"batch_size": "full batch", "num_steps": "unset", "epochs": "unset", "learning_rate": "step_size",
                "step_size": "by variant"}.get(option, "None")
    return str(default)


def method_flags() -> list[tuple[str, str, dict]]:
    """Every inference flag, generated from the registered methods' options dataclasses:
    ``(dest, option, argparse kwargs)``. Only flags the user gives are passed on; a flag whose
    option the chosen method does not take is an error naming the flags it does take. The
    help text lists the methods that take each flag, with their defaults."""
    out = []
    for cli in command_line_options():
        takers = ", ".join(
            m if isinstance(d, bool) else f"{m}={_shown_default(cli.option, d)}"
            for m, d in cli.takers.items()
        )
        kwargs: dict = {"help": f"{cli.help} [{takers}]"}
        if cli.type is bool:
            kwargs.update(action="store_const", const=True)
        elif cli.choices is not None:
            kwargs["choices"] = list(cli.choices)
        else:
            kwargs["type"] = cli.type
        kwargs["aliases"] = cli.aliases
        out.append((cli.dest, cli.option, kwargs))
    return out


METHOD_FLAGS = method_flags()
"""The flags of the methods registered when this module was imported (see :func:`method_flags`)."""


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
        description="Fit a Bayesian network to a built-in dataset, MNIST / Fashion-MNIST or your own .csv/.npz; write "
        "DIR/posterior.nc (ArviZ netCDF), DIR/metrics.json (test metrics, timings and how to reload the data), "
        "DIR/config.toml (the run's settings: --config DIR/config.toml repeats it) "
        "and DIR/uncertainty.png (2-D classification, 1-D regression) or DIR/loss.png (others). For images the posterior keeps "
        f"the variational parameters and {IMAGE_NUM_SAMPLES} draws by default (--num-samples).",
        formatter_class=DefaultsOnce,
    )
    g = p.add_argument_group("data")
    g.add_argument("--config", metavar="FILE", help="TOML file of option = value lines (the names of the flags below, with _; "
                   "flags typed override it); a run folder's config.toml repeats that run")
    g.add_argument("--data", default="moons", metavar="{" + ",".join([*sorted(SYNTHETIC), *IMAGE_SETS]) + ",PATH}",
                   help="built-in dataset (generated locally), MNIST / Fashion-MNIST (read from local files), or your "
                   "own .csv (header row; --target names the target, every other column is a numeric feature) or .npz "
                   "(arrays x, y, optional x_test, y_test)")
    add_file_flags(g)
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
    g.add_argument("--scale", type=float, default=None, help="the fixed prior scale with --hyperprior fixed (default 1)")
    g.add_argument("--per", default=None, choices=["layer", "network", "unit"], help="scope of a sampled scale (default layer)")
    g.add_argument("--obs-noise", type=float, default=None, help="regression: fix the observation sd, in the targets' units (default: learn it)")
    g.add_argument("--no-standardize", action="store_true", help="MLP: feed the data as given (default: inputs, and regression "
                   "targets, standardised on the training rows inside the model, recorded with it; predictions stay in the data's units)")
    g = p.add_argument_group(
        "inference",
        "Every flag is passed to the chosen --method; a flag the method does not take is an error. "
        "Unset flags keep the method's default; [brackets] list the methods that take a flag, with "
        "their defaults.",
    )
    g.add_argument("--method", default="advi", choices=list(registered()), help="inference method")
    g.add_argument("--init", default=None, metavar="PATH", help="start from these weights instead of at random: a run "
                   "folder or posterior .nc (its mean draw), or an .npz of site arrays; laplace with --steps 0 takes the Laplace "
                   "approximation at them without fitting")
    for dest, _option, kwargs in method_flags():
        kwargs = dict(kwargs)
        g.add_argument(_flag(dest), *kwargs.pop("aliases"), dest=dest, default=argparse.SUPPRESS, **kwargs)
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=0, help="seed for data generation and inference")
    g.add_argument("--out", required=True, help="output folder (created; a refit replaces the files bnnpp wrote there and keeps yours; a symbolic link is followed)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--allow-nan-stop", action="store_true", help="exit 0 when training stopped early on a NaN/inf (default: exit 3)")
    g.add_argument("--resume", action="store_true", help="continue an interrupted fit from its checkpoint (.OUT.checkpoints beside OUT; same flags)")
    g.add_argument("--fresh", action="store_true", help="discard an interrupted fit's checkpoint and start from step 0 (without --resume "
                   "or --fresh a fit whose checkpoint exists is refused)")
    g.add_argument("--checkpoint-every", type=int, default=None, metavar="STEPS", help="also checkpoint every STEPS steps (nuts: warm-up and draws); Ctrl-C and SIGTERM always checkpoint")
    g.add_argument("--checkpoint-minutes", type=float, default=10.0, metavar="M", help="checkpoint every M minutes")
    g.add_argument("--no-cache", action="store_true", help="do not use JAX's persistent compilation cache")
    g = p.add_argument_group("devices", "Run on a device mesh (bnnpp.inference.sharding); with --distributed on every process's devices.")
    g.add_argument("--devices", type=int, default=None, metavar="N", help="use N devices: chains/members one block per device when they divide evenly, else the minibatch split over them")
    g.add_argument("--mesh", default=None, metavar="SPEC", help="mesh axis sizes, e.g. data=2,members=2 (data splits each minibatch, members/chains the ensemble members or chains)")
    g.add_argument("--distributed", action="store_true", help="join a multi-process run (jax.distributed) before fitting; process 0 writes --out (default mesh: every device, no checkpoints)")
    g.add_argument("--coordinator", default=None, metavar="HOST:PORT", help="--distributed: process 0's address (default $JAX_COORDINATOR_ADDRESS or the cluster's)")
    g.add_argument("--num-processes", type=int, default=None, help="--distributed: processes in the run (default $BNNPP_NUM_PROCESSES or the cluster's)")
    g.add_argument("--process-id", type=int, default=None, help="--distributed: this process, 0..num-processes-1 (default $BNNPP_PROCESS_ID or the cluster's)")
    p.set_defaults(handler=run)


def _file_record(args) -> dict:
    """The data record of a user's .csv/.npz (see :func:`bnnpp.runs.dataset_from_record`)."""
    check_file(args.data)
    for flag, value in (("--data-noise", args.data_noise), ("--data-dir", args.data_dir), ("--normalize", args.normalize),
                        ("--validation", args.validation), ("--train-subset", args.train_subset)):
        if value is not None:
            raise ValueError(f"{flag} applies to the built-in sets, not to your file {args.data}")
    if args.model != "mlp":
        raise ValueError(f"--model {args.model} takes 28×28 images: use --model mlp for a table")
    return file_record(args.data, args.target, args.task, args.test_fraction, args.seed)


def _data_record(args) -> dict:
    """How to load (and later reload) this run's data; checks the data flags against --data."""
    if is_file_data(args.data):
        return _file_record(args)
    check_builtin(args.data, args.target, args.task, args.test_fraction)
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


def _model(args, prior, task: str, num_classes: int | None):
    """The network of --model with the CLI's defaults (MLP widths and activation per data kind)."""
    image = args.data in IMAGE_SETS
    if args.model != "mlp":
        if args.hidden is not None:
            raise ValueError(f"--hidden sets MLP widths; --model {args.model} has a fixed architecture (bnnpp.models.ARCHITECTURES)")
        build = getattr(bnnpp.models, args.model, None)
        if build is None:
            raise ValueError(f"--model {args.model} needs bnnpp.models.{args.model}, which this install lacks; use --model mlp")
        if args.no_standardize:
            raise ValueError(f"--no-standardize applies to --model mlp; --model {args.model} sees the images as --normalize leaves them")
        return build(prior=prior, num_classes=num_classes, activation=args.activation)
    hidden = args.hidden if args.hidden is not None else ((400, 400) if image else (5, 5))
    activation = args.activation or ("relu" if image else "tanh")
    if task == "classification":
        return bnnpp.models.mlp(hidden, activation=activation, likelihood="categorical", num_classes=num_classes, prior=prior,
                                standardize=not args.no_standardize)
    return bnnpp.models.mlp(hidden, activation=activation, likelihood="gaussian", noise=args.obs_noise, prior=prior,
                            standardize=not args.no_standardize)


def _build(args) -> tuple[Any, Any, dict, dict]:
    """Everything that can fail on user input, before any compilation: returns the dataset,
    the model, the inference options and the data record for metrics.json."""
    if args.seed < 0:
        raise ValueError(f"--seed must be ≥ 0, got {args.seed}")
    if args.seed >= 2**32:
        raise ValueError(f"--seed must be below 2**32 = {2**32}, got {args.seed}")
    if not args.out.strip():
        raise ValueError("--out is empty: name the run folder to write, e.g. --out runs/moons")
    try:
        files.real_folder(args.out)  # a file, or a symbolic link to nothing: refused before training
    except ValueError as e:
        raise ValueError(f"--out {e}") from None
    checkpoints = checkpoint_folder(args.out)
    if os.path.lexists(checkpoints) and not os.path.isdir(checkpoints):
        raise ValueError(f"{checkpoints}, where this run keeps its checkpoints, is a file: remove it or choose another --out")
    if args.resume and args.fresh:
        raise ValueError("--resume continues a fit's checkpoint and --fresh discards it: give one of them")
    if os.path.isdir(args.out) and os.listdir(args.out) and not os.path.isfile(os.path.join(args.out, "metrics.json")):
        # the run folder is replaced whole: never a folder that is not a bnnpp run
        raise ValueError(f"--out {args.out} is a folder with other files in it, not a bnnpp run: choose a new or empty folder")
    files.check_writable(args.out)  # before anything compiles: a fit is never lost to an unwritable --out
    check_request(args.devices, args.mesh)  # the mesh's own errors (more devices than exist) before the data is read
    record = _data_record(args)
    image = args.data in IMAGE_SETS
    prior = priors.from_flags(args.prior, args.hyperprior, args.hyperprior_params, args.scale, args.per)
    backend = get_backend(args.method)
    flags = method_flags()
    given = [(dest, opt) for dest, opt, _ in flags if hasattr(args, dest)]
    if args.method == "mc_dropout":  # its relaxation temperature was `temperature` (an older run's config.toml)
        given = [(dest, "relaxation_temperature" if opt == "temperature" else opt) for dest, opt in given]
    refused = [backend.options.refused[opt] for _, opt in given if opt in backend.options.refused]
    if refused:  # an option of the common vocabulary the method cannot take, with why
        raise ValueError(refused[0])
    wrong = [_flag(dest) for dest, opt in given if opt not in backend.defaults]
    if wrong:
        takes = [spec.cli_flag for spec in backend.options.specs() if spec.flag is not None]  # in the method's order
        raise ValueError(
            f"{', '.join(wrong)} does not apply to --method {args.method}; it takes {', '.join(takes)}"
        )
    options = {opt: getattr(args, dest) for dest, opt in given}
    if image and "num_samples" in backend.defaults:
        options.setdefault("num_samples", IMAGE_NUM_SAMPLES)
        if options["num_samples"] < MIN_TEST_DRAWS:
            raise ValueError(f"--num-samples {options['num_samples']} is too few for test metrics on images: use at least {MIN_TEST_DRAWS}")
    merged = backend.check_options(options)
    shard = _process_share(args, merged)  # a --distributed process loads only its block of the training rows
    if image:
        if args.obs_noise is not None:
            raise ValueError("--obs-noise applies to regression data (sinusoid) only")
        model = _model(args, prior, "classification", 10)
        dataset = runs.dataset_from_record(record, shard)  # reads the files: after every flag check
        if record["validation"] and "validation_data" in backend.defaults:
            options["validation_data"] = (dataset.x_val, dataset.y_val)
    else:
        if "sha256" in record:
            dataset = runs.dataset_from_record(record, shard)
            record["preprocessing"] = dataset.transform.to_dict()  # what bnnpp predict applies to new rows
        else:
            data_kwargs = {} if args.data_noise is None else {"noise": args.data_noise}
            dataset = bnnpp.data.load_synthetic(args.data, seed=args.seed, shard=shard, **data_kwargs)
        if dataset.task == "classification" and args.obs_noise is not None:
            raise ValueError("--obs-noise applies to regression data only")
        model = _model(args, prior, dataset.task, dataset.num_classes)
    x, y = check_data(dataset, model)
    xg, yg = (x, y) if dataset.rows is None else global_rows(x, y, dataset.rows.total)  # every process's rows
    parsed = backend.parse(options)
    parsed.check_data(xg, yg)
    # room for the run folder, before anything compiles: draws of every parameter, and with
    # small data the pointwise log-likelihood and a replicated data set per draw
    merged = parsed.as_dict()
    draws = int(merged.get("num_samples", 1)) * int(merged.get("num_chains", 1))
    params = num_parameters(check_model(model, x, y))  # the model's own checks first (its "y" site, memory)
    per_draw = params + (2 * len(xg) if xg.size <= MAX_SAVED_DATA else 0)
    files.check_free_space(os.path.dirname(os.path.abspath(args.out)), 4 * draws * per_draw + xg.nbytes, "the run folder")
    return dataset, model, options, record


def _process_share(args, options: dict) -> tuple[int, int] | None:
    """``(process, processes)`` when this process of a ``--distributed`` run needs only its block
    of the training rows (the default mesh, every device, or --devices/--mesh with a data axis
    that is a multiple of the process count), else ``None``: every row is loaded (one process,
    or chains/members only on the mesh)."""
    if not args.distributed:
        return None
    devices = jax.device_count() if args.devices is None and args.mesh is None else args.devices
    chains = int(options.get("members") or options.get("num_chains") or 1)
    return process_share(devices, args.mesh, chains)


#: ``bnnpp fit`` flags that control the command, not the run: left out of a run's config.toml.
NOT_CONFIG = frozenset({"out", "quiet", "resume", "fresh", "checkpoint_every", "checkpoint_minutes", "no_cache", "allow_nan_stop",
                        "config", "handler", "argv", "command", "import_seconds",
                        "distributed", "coordinator", "num_processes", "process_id"})  # how a fit is launched


def start_values(path: str) -> dict:
    """``--init PATH`` as ``{site: array}``: a run folder's or a ``.nc`` file's posterior (its mean
    over chains and draws), or the arrays of an ``.npz`` file named by site. One-line
    ``ValueError`` for a missing or unreadable file."""
    if os.path.isdir(path):
        path = os.path.join(path, "posterior.nc")
    if not os.path.isfile(path):
        raise ValueError(f"--init: {path} not found: give a run folder, a posterior .nc file or an .npz of site arrays")
    if path.endswith(".npz"):
        try:
            with np.load(path, allow_pickle=False) as f:
                return {k: np.asarray(f[k]) for k in f.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"--init: cannot read {path} as an .npz of site arrays ({type(e).__name__}: {e})") from None
    post = bnnpp.load(path)
    return {k: np.asarray(v).mean(axis=(0, 1)) for k, v in post.samples.items()}


def resolved_config(args, options: dict) -> str:
    """The run's ``config.toml`` text: every ``bnnpp fit`` setting that shapes the result (data,
    model, method, seed) and every option of the method as it ran, so that ``bnnpp fit --config
    RUN/config.toml --out NEW`` repeats the run. Of two exclusive options both set (a run
    length given as ``epochs`` where ``num_steps`` has a default) the one given is kept."""
    flags = {dest for dest, _, _ in method_flags()}
    out: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key in NOT_CONFIG or key in flags or value is None:
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    for key in config.PATH_KEYS:  # absolute: a config file's relative paths are read from its own folder
        if key == "data" and not is_file_data(args.data):
            continue
        if out.get(key) is not None:
            out[key] = os.path.abspath(out[key])
    method = get_backend(args.method)
    defaults = method.defaults
    taken = {spec.name for spec in method.options.specs() if spec.flag is not None}
    kept = {k: v for k, v in options.items() if k in taken and v is not None}
    for a, b in method.exclusive:
        if a in kept and b in kept:  # the one whose default is None was given
            kept.pop(b if defaults.get(a) is None else a)
    out.update(kept)
    comment = f"bnnpp fit configuration (bnnpp {bnnpp.__version__}); repeat with: bnnpp fit --config config.toml --out NEW"
    return config.dumps(out, comment)


def fit_and_report(args) -> dict:
    """Run ``bnnpp fit`` from parsed arguments; returns the metrics dict also written to disk.
    The run folder is locked for the whole command: a second ``bnnpp fit`` to the same
    ``--out`` fails at once."""
    try:
        dataset, model, options, record = _build(args)
        if not distributed.is_writer():  # another process of a --distributed run: fit, write nothing
            return _fit_and_write(args, dataset, model, options, record)
        with files.run_folder_lock(args.out):
            return _fit_and_write(args, dataset, model, options, record)
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None


def _fit_and_write(args, dataset, model, options, record) -> dict:
    if not args.no_cache:
        cache = os.environ.get("BNNPP_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "bnnpp", "jax"))
        jax.config.update("jax_compilation_cache_dir", cache)
        # cache every program, not only those over JAX's default 1 s: a warm start loads them all
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    checkpoint_dir = checkpoint_folder(args.out)
    checkpointing = {"checkpoint_dir": checkpoint_dir, "checkpoint_every": args.checkpoint_every,
                     "checkpoint_minutes": args.checkpoint_minutes, "resume": args.resume}
    runs.preload_writers()  # ArviZ and netCDF load while the network trains, not after
    if args.distributed:  # no checkpoints across processes; the mesh defaults to every device
        checkpointing = {}
    elif args.resume and not has_checkpoint(checkpoint_dir):
        print(f"bnnpp fit: --resume: no checkpoint in {checkpoint_dir}; training from step 0", file=sys.stderr)
    elif not args.resume and not args.fresh and has_checkpoint(checkpoint_dir):  # never discard a stopped fit's progress unasked
        raise CLIError(f"a checkpoint of an interrupted fit to {args.out} exists in {checkpoint_dir}: add --resume to continue it "
                       "or --fresh to discard it and start over")
    mesh = {"devices": args.devices, "mesh": args.mesh}
    if args.distributed and args.devices is None and args.mesh is None:
        mesh["devices"] = jax.device_count()
    t0 = time.perf_counter()
    try:
        # warnings are shown once the fit returns: a fit that fails says so in one line only
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            post = bnnpp.fit(model, dataset, method=args.method, seed=args.seed, progress=not args.quiet, **options,
                             **checkpointing, **mesh, **({"init": start_values(args.init)} if args.init else {}))
    except (ValueError, RuntimeError) as e:  # a checkpoint of another fit; chains NaN before the first draw
        raise CLIError(str(e).replace("delete the folder to start over", "delete the folder or run with --fresh (not --resume) to start over")) from None
    overflow = [str(w.message) for w in caught if "overflow to NaN/inf" in str(w.message)]
    if overflow:  # draws that are not numbers make every metric meaningless
        raise CLIError(overflow[0])
    for w in caught:
        if post.stats.stopped_at is None or "NaN/inf at step" not in str(w.message):  # a NaN stop gets its own line
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    fit_seconds = time.perf_counter() - t0
    if not distributed.is_writer():  # the other processes of a --distributed run: process 0 reports
        return {}
    if dataset.rows is not None and post.has_data:  # the figure shows every training row, as post holds them
        dataset = dataclasses.replace(dataset, x_train=post.x, y_train=post.y, rows=None)
    t0 = time.perf_counter()
    test = runs.metrics_on_test_set(post, dataset)
    seconds = {
        "import": getattr(args, "import_seconds", 0.0),  # set by bnnpp.cli.main
        "compile": post.info["compile_seconds"],
        "fit": fit_seconds,
        "predict": time.perf_counter() - t0,
    }
    report = runs.fit_report(post, model, record, seed=args.seed, test=test, seconds=seconds)
    texts = {"config.toml": resolved_config(args, post.info["options"])}
    try:
        written = runs.write_fit_run(args.out, post, dataset, report, texts)
    except (ValueError, OSError) as e:  # a full disk, a folder that went read-only
        raise CLIError(f"could not write the run folder {args.out}: {e}") from None
    except files.PublishInterrupted:  # the run is in place: its checkpoints are done with
        remove_checkpoints(checkpoint_dir)
        raise
    remove_checkpoints(checkpoint_dir)  # the run is complete: nothing to resume
    return written


def run(args) -> int:
    t0 = time.perf_counter()
    try:
        if args.distributed:
            if args.resume:
                raise CLIError("--resume does not apply to --distributed fits: they write no checkpoints")
            try:
                distributed.initialize(args.coordinator, args.num_processes, args.process_id)
            except (ValueError, RuntimeError) as e:  # the coordinator could not be found or joined
                raise CLIError(str(e)) from None
        elif any(v is not None for v in (args.coordinator, args.num_processes, args.process_id)):
            raise CLIError("--coordinator, --num-processes and --process-id need --distributed")
        report = fit_and_report(args)
    except TrainingInterrupted as e:
        name = signal.Signals(e.signum).name
        if e.checkpoint_dir is not None:
            command = shlex.join(["bnnpp", *getattr(args, "argv", ["fit", "..."]), *([] if args.resume else ["--resume"])])
            print(f"bnnpp fit: {name}: stopped after step {e.step}; resume with: {command}", file=sys.stderr)
        else:
            print(f"bnnpp fit: {name}: stopped after step {e.step}; nothing to resume", file=sys.stderr)
        return e.exit_code
    except files.PublishInterrupted as e:  # held until the run folder was swapped in
        name = signal.Signals(e.signum).name
        print(f"bnnpp fit: {name}: stopped after writing the run folder {args.out} (complete)", file=sys.stderr)
        return 128 + int(e.signum)
    except KeyboardInterrupt:  # a second Ctrl-C, or one during NUTS's warm-up or a block: nothing to resume
        print("bnnpp fit: SIGINT: stopped at once; nothing was written", file=sys.stderr)
        return 130
    if not distributed.is_writer():
        return 0
    test = report["test"]
    headline = (
        f"test accuracy {test['accuracy']:.3f}, NLL {test['nll']:.3f}, ECE {test['ece']:.3f}"
        if "accuracy" in test
        else f"test RMSE {test['rmse']:.3f}, NLL {test['nll']:.3f}, 95% coverage {test['coverage_95']:.2f}"
    )
    s = report["seconds"]
    stopped = report.get("stopped_at")
    if stopped is not None:
        headline += f"; STOPPED EARLY: NaN/inf at step {stopped}, parameters from step {stopped - 1} kept"
    print(f"{report['data']} / {report['method']}: {headline}")
    print(
        f"seconds: import {s['import']:.1f}, compile {s['compile']:.1f}, fit {s['fit']:.1f} (compile included), "
        f"predict {s['predict']:.1f}, write {s['write']:.1f}, command {time.perf_counter() - t0 + s['import']:.1f}"
    )
    print(f"wrote {os.path.join(args.out, report['files'][0])}, {', '.join(report['files'][1:])}")
    if stopped is not None and not args.allow_nan_stop:
        print(f"bnnpp fit: training stopped at step {stopped} on a NaN/inf (exit 3; --allow-nan-stop exits 0): "
              "lower the learning rate or use a tighter prior", file=sys.stderr)
        return EXIT_NAN_STOP
    return 0


__getattr__ = runs.deprecated_aliases(
    __name__,
    {
        "load_dataset_from_report": "bnnpp.runs.dataset_from_record",
        "evaluate": "bnnpp.runs.metrics_on_test_set",
        "block_rows": "bnnpp.runs.block_rows",
        "loss_figure": "bnnpp.runs.loss_figure",
        "figure": "bnnpp.runs.figure",
    },
)
