"""The ``bnnpp`` command line: one file per command, each a thin wrapper over library code."""

from __future__ import annotations

import argparse
import sys
import warnings

from bnnpp import config
from bnnpp.cli import compare as compare_cmd
from bnnpp.cli import evaluate as evaluate_cmd
from bnnpp.cli import fit as fit_cmd
from bnnpp.cli import predict as predict_cmd
from bnnpp.cli import prune as prune_cmd
from bnnpp.cli import sweep as sweep_cmd
from bnnpp.cli._errors import CLIError

__all__ = ["CLIError", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bnnpp",
        description="Bayesian neural networks on JAX/NumPyro: fit, predict, analyse.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fit_cmd.add_parser(sub)
    predict_cmd.add_parser(sub)
    compare_cmd.add_parser(sub)
    sweep_cmd.add_parser(sub)
    evaluate_cmd.add_parser(sub)
    prune_cmd.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bnnpp`` console script; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        expanded = config.expand_argv(parser, argv)  # --config FILE: its options, overridden by the flags typed
    except ValueError as e:
        print(f"bnnpp {argv[0]}: error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(expanded)
    args.argv = argv  # to print the command that resumes a fit
    # a library warning (NaN stop, NUTS divergences) is one line on stderr, without a source line
    formatwarning = warnings.formatwarning
    warnings.formatwarning = lambda message, category, *rest, **kw: f"bnnpp {args.command}: {category.__name__}: {message}\n"
    try:
        return args.handler(args)
    except CLIError as e:
        print(f"bnnpp {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = formatwarning  # main() may run inside another program (tests)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
