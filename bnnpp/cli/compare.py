"""``bnnpp compare``: fit several methods to one dataset with one seed and write
compare.md, compare.json and the figures into ``--out`` (the library side:
:func:`bnnpp.compare.compare_methods` and :func:`bnnpp.runs.write_compare_run`)."""

from __future__ import annotations

import argparse
import json
import os
import time

import bnnpp
from bnnpp import priors, reports, runs
from bnnpp.cli._data import add_file_flags, check_builtin, file_record, is_file_data
from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce
from bnnpp.inference import get_method, registered
from bnnpp.records import CompareResult

CLASSIFICATION_SETS = ("moons", "circles")
COMPARE_SETS = (*CLASSIFICATION_SETS, "sinusoid")


def _set(text: str) -> tuple[str, str, object]:
    """``METHOD.OPTION=VALUE`` → (method, option, value parsed as JSON, else a string)."""
    try:
        lhs, value = text.split("=", 1)
        method, option = lhs.split(".", 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--set takes METHOD.OPTION=VALUE such as nuts.num_samples=500, got {text!r}") from None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return method.strip(), option.strip(), parsed


def _set_reference(text: str) -> tuple[str, object]:
    """``OPTION=VALUE`` → (option, value parsed as JSON, else a string)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set-reference takes OPTION=VALUE such as num_samples=2000, got {text!r}")
    option, value = text.split("=", 1)
    try:
        return option.strip(), json.loads(value)
    except json.JSONDecodeError:
        return option.strip(), value


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="fit several methods on the same data and seed; write compare.md/json and figures",
        description="Fit each --methods entry to the same data with the same seed; write DIR/compare.md and "
        "DIR/compare.json (test accuracy, NLL, Brier, ECE, mean entropy and mutual information — or for a "
        "regression RMSE, NLL, 95% coverage and predictive sds in the target's units —, max R-hat and min ESS of "
        "permutation-invariant quantities, PSIS k̂ of VI fits, PSIS-LOO elpd ± se, seconds; ArviZ's LOO ranking; "
        "with --reference nuts, each method's predictive agreement with a long NUTS run) and figures: "
        "decision_maps.png (2-D inputs, every class named) and reliability.png, or for a regression bands.png "
        "(1-D inputs), predicted_vs_observed.png, calibration.png and residuals.png; forest_scales.png, "
        "trace_<method>.png (MCMC methods), reference.png.",
        formatter_class=DefaultsOnce,
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of option = value lines (the flags' names with _); a [METHOD] table sets that method's options; flags typed override it",
    )
    p.add_argument(
        "--data",
        default="moons",
        metavar="{" + ",".join(COMPARE_SETS) + ",PATH}",
        help="built-in dataset (sinusoid: 1-D regression) or your own .csv (header row; --target names the "
        "target, every other column is a numeric feature) or .npz (arrays x, y, optional x_test, y_test)",
    )
    add_file_flags(p)
    p.add_argument("--data-noise", type=float, default=None, help="noise of the generated data")
    p.add_argument("--methods", default=None, help="comma-separated methods (default: every registered method this environment can run)")
    p.add_argument("--hidden", default="5,5", help="hidden widths, comma-separated")
    p.add_argument("--activation", default="tanh", choices=sorted(bnnpp.models.ACTIVATIONS))
    p.add_argument("--prior", default="normal", choices=list(priors.PRIORS), help="weight prior family")
    p.add_argument("--hyperprior", default="inverse-gamma", choices=["fixed", *priors.HYPERPRIORS], help="prior on each layer's scale")
    p.add_argument("--scale", type=float, default=None, help="the fixed prior scale with --hyperprior fixed (default 1)")
    p.add_argument(
        "--set",
        dest="sets",
        type=_set,
        action="append",
        default=[],
        metavar="METHOD.OPTION=VALUE",
        help="override one method option, e.g. --set nuts.num_samples=1000 (repeatable)",
    )
    p.add_argument("--noise", type=float, default=None, help="regression: the known observation sd (default: learned)")
    p.add_argument(
        "--reference",
        default=None,
        metavar="METHOD",
        help="fit METHOD (normally nuts) with long chains (4 × (1000 + 3000); R-hat checked; cached, see "
        "--reference-cache) and report each method's predictive agreement with it",
    )
    p.add_argument(
        "--reference-cache",
        default=None,
        metavar="DIR",
        help="folder where the reference fit is cached and found again (default: $BNNPP_CACHE_DIR/references or ~/.cache/bnnpp/references)",
    )
    p.add_argument("--no-reference-cache", action="store_true", help="always fit the reference; cache nothing")
    p.add_argument(
        "--set-reference",
        dest="reference_sets",
        type=_set_reference,
        action="append",
        default=[],
        metavar="OPTION=VALUE",
        help="override one option of the reference fit, e.g. num_samples=2000 (repeatable)",
    )
    p.add_argument("--quick", action="store_true", help="tiny settings for every method (a smoke test, not a result)")
    p.add_argument("--seed", type=int, default=0, help="seed for data and every fit")
    p.add_argument("--out", required=True, help="output folder (created; the files written are replaced)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(handler=run)


def load_data(args) -> tuple[bnnpp.data.Dataset, dict | None]:
    """The dataset of ``--data`` (a generated set, or a user's file read as ``bnnpp fit`` reads
    it) and, for a file, its data record (:func:`bnnpp.cli._data.file_record`), else ``None``.
    Uses ``args.data``, ``target``, ``task``, ``test_fraction``, ``data_noise`` and ``seed``."""
    if is_file_data(args.data):
        if args.data_noise is not None:
            raise ValueError(f"--data-noise applies to the built-in sets, not to your file {args.data}")
        record = file_record(args.data, args.target, args.task, args.test_fraction, args.seed)
        return runs.dataset_from_record(record), record
    check_builtin(args.data, args.target, args.task, args.test_fraction)
    if args.data not in COMPARE_SETS:
        raise ValueError(f"--data {args.data}: compare takes {', '.join(COMPARE_SETS)} or a .csv/.npz file")
    kwargs = {} if args.data_noise is None else {"noise": args.data_noise}
    return bnnpp.data.load_synthetic(args.data, seed=args.seed, **kwargs), None


def _build(args):
    # bnnpp.compare imports ArviZ and matplotlib (heavy imports): loaded when this command runs, not
    # when any `bnnpp` command starts
    from bnnpp.compare import check_methods

    if args.seed < 0:
        raise ValueError(f"--seed must be ≥ 0, got {args.seed}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out} is a file: give a folder path")
    names = args.methods.split(",") if args.methods is not None else [m for m in registered() if get_method(m).unavailable is None]
    methods = check_methods(names)
    try:
        hidden = tuple(int(h) for h in args.hidden.split(",") if h.strip())
    except ValueError:
        raise ValueError(f"--hidden takes comma-separated widths such as 5,5, got {args.hidden!r}") from None
    prior = priors.from_flags(args.prior, args.hyperprior, None, args.scale, None)
    dataset, record = load_data(args)
    if args.noise is not None and (dataset.task != "regression" or args.noise <= 0):
        raise ValueError(f"--noise is the known observation sd of a regression, a number > 0; got {args.noise} for {args.data}")
    if dataset.task == "regression":
        model = bnnpp.models.mlp(hidden, activation=args.activation, likelihood="gaussian", noise=args.noise, prior=prior)
    else:
        model = bnnpp.models.mlp(hidden, activation=args.activation, num_classes=dataset.num_classes, prior=prior)
    if args.reference is not None:
        check_methods([args.reference])
    elif args.reference_sets:
        raise ValueError("--set-reference needs --reference METHOD (e.g. --reference nuts)")
    elif args.reference_cache is not None or args.no_reference_cache:
        raise ValueError("--reference-cache/--no-reference-cache need --reference METHOD (e.g. --reference nuts)")
    if args.reference_cache is not None and args.no_reference_cache:
        raise ValueError("give --reference-cache DIR or --no-reference-cache, not both")
    if args.reference_cache is not None and os.path.exists(args.reference_cache) and not os.path.isdir(args.reference_cache):
        raise ValueError(f"--reference-cache {args.reference_cache} is a file: give a folder path")
    options: dict[str, dict] = {}
    for method, option, value in args.sets:
        if method not in methods:
            raise ValueError(f"--set {method}.{option}: {method} is not in --methods ({', '.join(methods)})")
        if option not in get_method(method).defaults:
            raise ValueError(f"--set {method}.{option}: {method} takes {', '.join(sorted(get_method(method).defaults))}")
        options.setdefault(method, {})[option] = value
    reference_options = dict(args.reference_sets)
    if args.reference is not None:
        known = get_method(args.reference).defaults
        unknown = [o for o in reference_options if o not in known]
        if unknown:
            raise ValueError(f"--set-reference {unknown[0]}: {args.reference} takes {', '.join(sorted(known))}")
    return dataset, model, methods, options, reference_options, record


def run(args) -> int:
    # bnnpp.compare imports ArviZ and matplotlib (heavy imports): loaded when this command runs
    from bnnpp.compare import REFERENCE_OPTIONS, base_options, compare_methods

    t0 = time.perf_counter()
    try:
        dataset, model, methods, options, reference_options, record = _build(args)
        base = base_options(methods, args.quick)
        for m in methods:  # reject bad --set values before the first fit compiles
            get_method(m).check_options({**base[m], **options.get(m, {})})
        if args.reference == "nuts":
            get_method("nuts").check_options({**REFERENCE_OPTIONS["quick" if args.quick else "full"], **reference_options})
        elif args.reference is not None:
            get_method(args.reference).check_options(reference_options)
    except (ValueError, TypeError, ImportError) as e:  # ImportError: a method this environment cannot run (BlackJAX too old)
        raise CLIError(str(e)) from None
    results, posteriors = compare_methods(
        model,
        dataset,
        methods,
        seed=args.seed,
        options=options,
        quick=args.quick,
        progress=not args.quiet,
        reference=args.reference,
        reference_options=reference_options,
        reference_cache=False if args.no_reference_cache else (args.reference_cache or True),
    )
    results = CompareResult.from_json(results)
    results.model = model.spec()
    if record is not None:  # a user's file: its path and SHA-256, to know which bytes were compared
        results.data_file = record
    results.quick = args.quick
    runs.write_compare_run(args.out, results, posteriors, dataset, started=t0)
    print(reports.compare_markdown(results))
    print(
        f"wrote {os.path.join(args.out, 'compare.md')}, compare.json and {len(results.figures)} figures in {time.perf_counter() - t0:.0f} s"
    )
    return 0


__getattr__ = runs.deprecated_aliases(__name__, {"write_figures": "bnnpp.runs.write_compare_figures"})
