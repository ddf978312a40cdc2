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
from typing import Any

import jax

import bnnpp
from bnnpp import config, distributed, files, priors, runs
from bnnpp.cli._data import add_file_flags, is_file_data
from bnnpp.cli._errors import CLIError
from bnnpp.cli._fit_flags import IMAGE_NUM_SAMPLES, _flag, _floats, _hidden, method_flags
from bnnpp.cli._fit_flags import METHOD_FLAGS as METHOD_FLAGS
from bnnpp.cli._fit_flags import MIN_TEST_DRAWS as MIN_TEST_DRAWS
from bnnpp.cli._fit_setup import _build, checkpoint_folder, has_checkpoint, start_values
from bnnpp.cli._fit_setup import _model as _model  # tests/test_scaling.py imports it from here
from bnnpp.cli._help import DefaultsOnce
from bnnpp.data import IMAGE_SETS, NORMALIZATIONS, SYNTHETIC
from bnnpp.inference import get_method, registered
from bnnpp.inference.checkpoints import TrainingInterrupted
from bnnpp.inference.checkpoints import remove as remove_checkpoints
from bnnpp.records import FitReport

MODELS = ("mlp", "cnn", "lenet5")
EXIT_NAN_STOP = 3
"""Exit status of a fit that stopped early on a NaN/inf (its run folder is still written)."""


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
    g.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of option = value lines (the names of the flags below, with _; "
        "flags typed override it); a run folder's config.toml repeats that run",
    )
    g.add_argument(
        "--data",
        default="moons",
        metavar="{" + ",".join([*sorted(SYNTHETIC), *IMAGE_SETS]) + ",PATH}",
        help="built-in dataset (generated locally), MNIST / Fashion-MNIST (read from local files), or your "
        "own .csv (header row; --target names the target, every other column is a numeric feature) or .npz "
        "(arrays x, y, optional x_test, y_test)",
    )
    add_file_flags(g)
    g.add_argument(
        "--data-noise",
        type=float,
        default=None,
        help="noise of the generated data (default: the dataset's: moons 0.3, circles 0.2, sinusoid 1.0)",
    )
    g.add_argument(
        "--data-dir",
        default=None,
        help="mnist/fashion_mnist: folder with the four IDX .gz files, or its parent (default: a tensorflow-datasets copy prepared in $TFDS_DATA_DIR or ~/tensorflow_datasets, else $BNNPP_DATA_DIR/<data>)",
    )
    g.add_argument(
        "--normalize",
        default=None,
        choices=list(NORMALIZATIONS),
        help="mnist/fashion_mnist pixels: /255, /126 (Blundell et al.) or standardised with the training mean and sd (default 255)",
    )
    g.add_argument(
        "--validation",
        type=int,
        default=None,
        help="mnist/fashion_mnist: last N training images held out for validation (default 10000; 0 for none)",
    )
    g.add_argument("--train-subset", type=int, default=None, help="mnist/fashion_mnist: train on the first N training images only")
    g = p.add_argument_group("model")
    g.add_argument(
        "--model", default="mlp", choices=list(MODELS), help="network: MLP, or for mnist/fashion_mnist the convolutional cnn / lenet5"
    )
    g.add_argument(
        "--hidden",
        type=_hidden,
        default=None,
        help="MLP hidden layer widths, comma-separated (default 5,5; 400,400 for mnist/fashion_mnist)",
    )
    g.add_argument(
        "--activation",
        default=None,
        choices=sorted(bnnpp.models.ACTIVATIONS),
        help="hidden activation (default tanh; relu for an MLP on mnist/fashion_mnist; cnn tanh, lenet5 relu)",
    )
    g.add_argument("--prior", default="normal", choices=list(priors.PRIORS), help="weight prior family")
    g.add_argument(
        "--hyperprior",
        default="inverse-gamma",
        choices=["fixed", *priors.HYPERPRIORS],
        help="prior on each layer's scale (inverse-gamma is on the variance); 'fixed' uses --scale",
    )
    g.add_argument(
        "--hyperprior-params",
        type=_floats,
        default=None,
        help="hyperprior parameters: s for half-normal/half-cauchy, a,b for inverse-gamma (default 1 / 1,1)",
    )
    g.add_argument("--scale", type=float, default=None, help="the fixed prior scale with --hyperprior fixed (default 1)")
    g.add_argument("--per", default=None, choices=["layer", "network", "unit"], help="scope of a sampled scale (default layer)")
    g.add_argument(
        "--obs-noise", type=float, default=None, help="regression: fix the observation sd, in the targets' units (default: learn it)"
    )
    g.add_argument(
        "--no-standardize",
        action="store_true",
        help="MLP on a table: feed the data as given (default: inputs, and regression "
        "targets, standardised on the training rows inside the model, recorded with it; predictions stay in the data's units). "
        "Images are never standardised pixel by pixel: they come as --normalize scales them",
    )
    g = p.add_argument_group(
        "inference",
        "Every flag is passed to the chosen --method; a flag the method does not take is an error. "
        "Unset flags keep the method's default; [brackets] list the methods that take a flag, with "
        "their defaults.",
    )
    g.add_argument("--method", default="advi", choices=list(registered()), help="inference method")
    g.add_argument(
        "--init",
        default=None,
        metavar="PATH",
        help="start from these weights instead of at random: a run "
        "folder or posterior .nc (its mean draw), or an .npz of site arrays; laplace with --steps 0 takes the Laplace "
        "approximation at them without fitting",
    )
    for dest, _option, kwargs in method_flags():
        kwargs = dict(kwargs)
        g.add_argument(_flag(dest), *kwargs.pop("aliases"), dest=dest, default=argparse.SUPPRESS, **kwargs)
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=0, help="seed for data generation and inference")
    g.add_argument(
        "--out",
        required=True,
        help="output folder (created; a refit replaces the files bnnpp wrote there and keeps yours; a symbolic link is followed)",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--allow-nan-stop", action="store_true", help="exit 0 when training stopped early on a NaN/inf (default: exit 3)")
    g.add_argument(
        "--resume", action="store_true", help="continue an interrupted fit from its checkpoint (.OUT.checkpoints beside OUT; same flags)"
    )
    g.add_argument(
        "--fresh",
        action="store_true",
        help="discard an interrupted fit's checkpoint and start from step 0 (without --resume "
        "or --fresh a fit whose checkpoint exists is refused)",
    )
    g.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="STEPS",
        help="also checkpoint every STEPS steps (nuts: warm-up and draws); Ctrl-C and SIGTERM always checkpoint",
    )
    g.add_argument("--checkpoint-minutes", type=float, default=10.0, metavar="M", help="checkpoint every M minutes")
    g.add_argument("--no-cache", action="store_true", help="do not use JAX's persistent compilation cache")
    g = p.add_argument_group("devices", "Run on a device mesh (bnnpp.inference.sharding); with --distributed on every process's devices.")
    g.add_argument(
        "--devices",
        type=int,
        default=None,
        metavar="N",
        help="use N devices: chains/members one block per device when they divide evenly, else the minibatch split over them",
    )
    g.add_argument(
        "--mesh",
        default=None,
        metavar="SPEC",
        help="mesh axis sizes, e.g. data=2,members=2 (data splits each minibatch, members/chains the ensemble members or chains)",
    )
    g.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-process run (jax.distributed) before fitting; process 0 writes --out (default mesh: every device, no checkpoints)",
    )
    g.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="--distributed: process 0's address (default $JAX_COORDINATOR_ADDRESS or the cluster's)",
    )
    g.add_argument(
        "--num-processes",
        type=int,
        default=None,
        help="--distributed: processes in the run (default $BNNPP_NUM_PROCESSES or the cluster's)",
    )
    g.add_argument(
        "--process-id",
        type=int,
        default=None,
        help="--distributed: this process, 0..num-processes-1 (default $BNNPP_PROCESS_ID or the cluster's)",
    )
    p.set_defaults(handler=run)


#: ``bnnpp fit`` flags that control the command, not the run: left out of a run's config.toml.
NOT_CONFIG = frozenset(
    {
        "out",
        "quiet",
        "resume",
        "fresh",
        "checkpoint_every",
        "checkpoint_minutes",
        "no_cache",
        "allow_nan_stop",
        "config",
        "handler",
        "argv",
        "command",
        "import_seconds",
        "distributed",
        "coordinator",
        "num_processes",
        "process_id",
    }
)  # how a fit is launched


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
    method = get_method(args.method)
    defaults = method.defaults
    taken = {spec.name for spec in method.options.specs() if spec.flag is not None}
    kept = {k: v for k, v in options.items() if k in taken and v is not None}
    for a, b in method.exclusive:
        if a in kept and b in kept:  # the one whose default is None was given
            kept.pop(b if defaults.get(a) is None else a)
    out.update(kept)
    comment = f"bnnpp fit configuration (bnnpp {bnnpp.__version__}); repeat with: bnnpp fit --config config.toml --out NEW"
    return config.dumps(out, comment)


def fit_and_report(args) -> FitReport | dict:
    """Run ``bnnpp fit`` from parsed arguments; returns the :class:`~bnnpp.records.FitReport`
    written to disk as ``metrics.json`` (``{}`` on a process of a ``--distributed`` run that
    does not write).
    The run folder is locked for the whole command: a second ``bnnpp fit`` to the same
    ``--out`` fails at once."""
    try:
        dataset, model, options, record = _build(args)
        if not distributed.is_writer():  # another process of a --distributed run: fit, write nothing
            return _fit_and_write(args, dataset, model, options, record)
        with files.run_folder_lock(args.out):
            return _fit_and_write(args, dataset, model, options, record)
    except (ValueError, TypeError, ImportError) as e:  # ImportError: a method this environment cannot run (BlackJAX too old)
        raise CLIError(str(e)) from None


def _fit_and_write(args, dataset, model, options, record) -> FitReport | dict:
    if not args.no_cache:
        cache = os.environ.get("BNNPP_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "bnnpp", "jax"))
        jax.config.update("jax_compilation_cache_dir", cache)
        # cache every program, not only those over JAX's default 1 s: a warm start loads them all
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    checkpoint_dir = checkpoint_folder(args.out)
    checkpointing = {
        "checkpoint_dir": checkpoint_dir,
        "checkpoint_every": args.checkpoint_every,
        "checkpoint_minutes": args.checkpoint_minutes,
        "resume": args.resume,
    }
    runs.preload_writers()  # ArviZ and netCDF load while the network trains, not after
    if args.distributed:  # no checkpoints across processes; the mesh defaults to every device
        checkpointing = {}
    elif args.resume and not has_checkpoint(checkpoint_dir):
        print(f"bnnpp fit: --resume: no checkpoint in {checkpoint_dir}; training from step 0", file=sys.stderr)
    elif not args.resume and not args.fresh and has_checkpoint(checkpoint_dir):  # never discard a stopped fit's progress unasked
        raise CLIError(
            f"a checkpoint of an interrupted fit to {args.out} exists in {checkpoint_dir}: add --resume to continue it "
            "or --fresh to discard it and start over"
        )
    mesh = {"devices": args.devices, "mesh": args.mesh}
    if args.distributed and args.devices is None and args.mesh is None:
        mesh["devices"] = jax.device_count()
    t0 = time.perf_counter()
    try:
        # warnings are shown once the fit returns: a fit that fails says so in one line only
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            post = bnnpp.fit(
                model,
                dataset,
                method=args.method,
                seed=args.seed,
                progress=not args.quiet,
                **options,
                **checkpointing,
                **mesh,
                **({"init": start_values(args.init)} if args.init else {}),
            )
    except (ValueError, RuntimeError) as e:  # a checkpoint of another fit; chains NaN before the first draw
        raise CLIError(
            str(e).replace("delete the folder to start over", "delete the folder or run with --fresh (not --resume) to start over")
        ) from None
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
    report = runs.fit_record(post, model, record, seed=args.seed, test=test, seconds=seconds)
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
    test = report.test
    headline = (
        f"test accuracy {test['accuracy']:.3f}, NLL {test['nll']:.3f}, ECE {test['ece']:.3f}"
        if "accuracy" in test
        else f"test RMSE {test['rmse']:.3f}, NLL {test['nll']:.3f}, 95% coverage {test['coverage_95']:.2f}"
    )
    s = report.seconds
    stopped = report.stopped_at
    if stopped is not None:
        headline += f"; STOPPED EARLY: NaN/inf at step {stopped}, parameters from step {stopped - 1} kept"
    print(f"{report.record['data']} / {report.method}: {headline}")
    print(
        f"seconds: import {s['import']:.1f}, compile {s['compile']:.1f}, fit {s['fit']:.1f} (compile included), "
        f"predict {s['predict']:.1f}, write {s['write']:.1f}, command {time.perf_counter() - t0 + s['import']:.1f}"
    )
    print(f"wrote {os.path.join(args.out, report.files[0])}, {', '.join(report.files[1:])}")
    if stopped is not None and not args.allow_nan_stop:
        print(
            f"bnnpp fit: training stopped at step {stopped} on a NaN/inf (exit 3; --allow-nan-stop exits 0): "
            "lower the learning rate or use a tighter prior",
            file=sys.stderr,
        )
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
