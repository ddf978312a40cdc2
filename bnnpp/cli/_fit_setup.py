"""Everything ``bnnpp fit`` checks and builds from its flags before anything compiles: the
data record, the dataset, the model, the method's options (:func:`build`), the checkpoint
folder and ``--init``'s start values."""

from __future__ import annotations

import os
import zipfile
from typing import Any

import jax
import numpy as np

import bnnpp
from bnnpp import files, priors, runs
from bnnpp.cli._data import check_builtin, check_file, file_record, is_file_data
from bnnpp.cli._fit_flags import IMAGE_NUM_SAMPLES, MIN_TEST_DRAWS, _flag, method_flags
from bnnpp.data import IMAGE_SETS
from bnnpp.inference import check_data, get_method
from bnnpp.inference.checkpoints import has_checkpoint as has_checkpoint  # the CLI's name for it
from bnnpp.inference.sharding import check_request, global_rows, process_share
from bnnpp.introspection import check_model, num_parameters
from bnnpp.posterior import MAX_SAVED_DATA


def checkpoint_folder(out: str) -> str:
    """Where an unfinished fit to ``out`` keeps its checkpoints: ``.NAME.checkpoints`` beside
    the real run folder (a symbolic link ``out`` resolved, so that every name of one folder
    shares its checkpoints), so that the run folder itself only ever changes by a whole-folder
    publish."""
    parent, name = os.path.split(os.path.realpath(os.path.abspath(out)))
    return os.path.join(parent, f".{name}.checkpoints")


def _file_record(args) -> dict:
    """The data record of a user's .csv/.npz (see :func:`bnnpp.runs.dataset_from_record`)."""
    check_file(args.data)
    for flag, value in (
        ("--data-noise", args.data_noise),
        ("--data-dir", args.data_dir),
        ("--normalize", args.normalize),
        ("--validation", args.validation),
        ("--train-subset", args.train_subset),
    ):
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
        for flag, value in (
            ("--data-dir", args.data_dir),
            ("--normalize", args.normalize),
            ("--validation", args.validation),
            ("--train-subset", args.train_subset),
        )
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
    # images come scaled by --normalize; standardising every pixel on its own would divide the
    # near-constant border pixels by sds of 1e-3 and magnify any noise there a thousandfold
    standardize = not args.no_standardize and not image
    if task == "classification":
        return bnnpp.models.mlp(
            hidden, activation=activation, likelihood="categorical", num_classes=num_classes, prior=prior, standardize=standardize
        )
    return bnnpp.models.mlp(
        hidden, activation=activation, likelihood="gaussian", noise=args.obs_noise, prior=prior, standardize=not args.no_standardize
    )


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
    backend = get_method(args.method)
    flags = method_flags()
    given = [(dest, opt) for dest, opt, _ in flags if hasattr(args, dest)]
    refused = [backend.options.refused[opt] for _, opt in given if opt in backend.options.refused and opt != "temperature"]
    if refused:  # an option of the common vocabulary the method cannot take, with why
        raise ValueError(refused[0])
    # --temperature is the posterior temperature for every method: one that cannot temper takes 1 and refuses the rest (parse)
    wrong = [_flag(dest) for dest, opt in given if opt not in backend.defaults and opt != "temperature"]
    if wrong:
        takes = [spec.cli_flag for spec in backend.options.specs() if spec.flag is not None]  # in the method's order
        raise ValueError(f"{', '.join(wrong)} does not apply to --method {args.method}; it takes {', '.join(takes)}")
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
    merged = parsed.resolve(len(xg)).as_dict()  # lengths and chains as the fit will run them (mclmc's num_chains: by device)
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
