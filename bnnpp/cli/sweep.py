"""``bnnpp sweep``: a grid of weight priors × scale hyperpriors on the 2-D sets, fitted by one
method with several seeds; writes sweep.json and sweep.md (test accuracy and NLL, mean ± sd
over seeds) into ``--out`` (the library side: :mod:`bnnpp.sweep` and
:func:`bnnpp.runs.write_sweep_run`)."""

from __future__ import annotations

import argparse
import os
import time

import bnnpp
from bnnpp import reports, runs, sweep
from bnnpp.cli._data import add_file_flags, check_builtin, file_record, is_file_data
from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce
from bnnpp.inference import get_method, registered

SWEEP_SETS = ("moons", "circles")
"""The built-in sets ``bnnpp sweep`` takes (it scores classifiers)."""


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _numbers(text: str, kind=float) -> list:
    try:
        return [kind(t) for t in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="fit a weight-prior x hyperprior grid on moons/circles or your classification file; write sweep.md/json",
        description="Fit every weight prior x scale hyperprior configuration (fixed scales on a log grid) "
        "with every seed on each dataset and tabulate test accuracy and NLL (mean ± sd over seeds; 'fixed' "
        "shows the best scale of the grid). Configurations that share structure train together in one "
        "vmapped compiled program (methods advi and map); --no-vmap fits them one by one.",
        formatter_class=DefaultsOnce,
    )
    p.add_argument("--config", metavar="FILE", help="TOML file of option = value lines (the flags' names with _); flags typed override it")
    p.add_argument(
        "--data",
        type=_names,
        default=["moons", "circles"],
        help="comma-separated: moons, circles, or your own classification .csv (header row; --target names the "
        "label column, every other column is a numeric feature) or .npz (arrays x, y, optional x_test, y_test)",
    )
    add_file_flags(p)
    p.add_argument("--data-noise", type=float, default=None, help="noise of the generated data (default: each set's)")
    p.add_argument("--priors", type=_names, default=["normal", "laplace", "cauchy", "flat"], help="weight priors")
    p.add_argument(
        "--hyperpriors", type=_names, default=list(sweep.HYPERPRIOR_CHOICES), help="scale hyperpriors ('fixed' uses --fixed-scales)"
    )
    p.add_argument("--fixed-scales", type=_numbers, default=[0.1, 0.3, 1.0, 3.0, 10.0], help="the fixed scales tried")
    p.add_argument("--method", default="advi", choices=list(registered()), help="inference method")
    p.add_argument("--num-steps", "--steps", dest="num_steps", type=int, default=None, help="optimisation steps (default: the method's)")
    p.add_argument("--num-samples", type=int, default=200, help="posterior draws per fit for test prediction")
    p.add_argument("--seeds", type=lambda t: _numbers(t, int), default=[0, 1, 2], help="inference seeds")
    p.add_argument("--hidden", type=lambda t: tuple(_numbers(t, int)), default=(5, 5), help="hidden widths")
    p.add_argument("--no-vmap", action="store_true", help="fit one configuration at a time (the reference loop)")
    p.add_argument("--out", required=True, help="output folder (created; the files written are replaced)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=run)


def _build(args):
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out} is a file: give a folder path")
    builtin = [d for d in args.data if not is_file_data(d)]
    bad = [d for d in builtin if d not in SWEEP_SETS]
    if bad or not args.data:
        raise ValueError(f"--data takes moons, circles and/or classification .csv/.npz files, got {','.join(args.data) or 'nothing'}")
    if len(builtin) == len(args.data):
        check_builtin(",".join(args.data), args.target, args.task, args.test_fraction)
    records = [file_record(d, args.target, args.task, args.test_fraction, 0) for d in args.data if is_file_data(d)]
    if records and args.data_noise is not None:
        raise ValueError(f"--data-noise applies to the built-in sets, not to your file {records[0]['data']}")
    if not args.seeds or any(not 0 <= s < 2**32 for s in args.seeds):  # before any dataset is read (bnnpp.sweep.run checks it too)
        raise ValueError(f"seeds must be a non-empty list of integers ≥ 0 and < 2**32, got {args.seeds!r}")
    configs = sweep.grid(args.priors, args.hyperpriors, args.fixed_scales)
    backend = get_method(args.method)
    options = {}
    if args.num_steps is not None:  # every method's length (see bnnpp.inference.options)
        options["num_steps"] = args.num_steps
    if "num_samples" in backend.defaults and args.method != "map":
        options["num_samples"] = args.num_samples
    backend.check_options(options)
    kwargs = {} if args.data_noise is None else {"noise": args.data_noise}
    file_records = iter(records)  # the data stay fixed over --seeds: a file's test split is drawn with seed 0
    datasets = [
        runs.dataset_from_record(next(file_records)) if is_file_data(d) else bnnpp.data.load_synthetic(d, seed=0, **kwargs)
        for d in args.data
    ]
    return datasets, configs, options, records


def run(args) -> int:
    t0 = time.perf_counter()
    try:
        datasets, configs, options, records = _build(args)
        result = sweep.sweep(
            datasets,
            configs,
            method=args.method,
            seeds=args.seeds,
            hidden=args.hidden,
            vmap=not args.no_vmap,
            progress=not args.quiet,
            **options,
        )
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None
    table = sweep.summarise(result["runs"])
    meta = {
        "method": args.method,
        "options": options,
        "seeds": args.seeds,
        "vmap": not args.no_vmap,
        "runs": len(result["runs"]),
        "seconds": result["seconds"],
        "compiled_groups": result["compiled_groups"],
        "hidden": list(args.hidden),
        **({"data_files": records} if records else {}),  # each file's path and SHA-256
    }
    runs.write_sweep_run(args.out, meta, table, result["runs"])
    print(reports.sweep_markdown(table, meta))
    print(f"wrote {os.path.join(args.out, 'sweep.md')} and sweep.json in {time.perf_counter() - t0:.0f} s")
    return 0


__getattr__ = runs.deprecated_aliases(__name__, {"markdown": "bnnpp.reports.sweep_markdown"})
