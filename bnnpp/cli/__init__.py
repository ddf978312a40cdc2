"""The ``bnnpp`` command line: one file per command, each a thin wrapper over library code.

A command's module (and with it JAX, NumPyro and the method registry) is imported only when
that command runs or its own ``--help`` is asked for: ``bnnpp --help`` lists the commands
from :data:`COMMANDS` without importing any of them, in well under a second. This is lazy
loading for start-up time, not a way around an import cycle.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import warnings

from bnnpp import config
from bnnpp.cli._errors import CLIError

__all__ = ["COMMANDS", "CLIError", "build_parser", "main"]

COMMANDS: dict[str, str] = {
    "fit": "fit a Bayesian network and write posterior.nc, metrics.json and a figure",
    "predict": "predictions of a run at new inputs (CSV/npz): mean and sd, or class probabilities and uncertainty",
    "compare": "fit several methods on the same data and seed; write compare.md/json and figures",
    "sweep": "fit a weight-prior x hyperprior grid on moons/circles or your classification file; write sweep.md/json",
    "evaluate": "scores and figures of a run on its test split or new labelled rows; images: also OOD detection",
    "prune": "test error after pruning weights by signal-to-noise ratio or magnitude",
}
"""Command name → one-line help (each command's module ``bnnpp.cli.<name>`` has ``add_parser``)."""

DESCRIPTION = "Bayesian neural networks on JAX/NumPyro: fit, predict, analyse."


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2), as every
    other ``bnnpp`` error is, instead of argparse's usage block and the error."""

    config_file: str | None = None  # set by main() while a --config file's values are parsed

    def error(self, message: str):
        origin = f" (--config {self.config_file} supplies its keys as these flags)" if _Parser.config_file else ""
        self.exit(2, f"{self.prog}: error: {message}{origin}; see {self.prog} --help\n")


def _config_path(argv: list[str]) -> str | None:
    """The FILE of ``--config FILE`` (or ``--config=FILE``) in ``argv``, else ``None``."""
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return None


def _parser(commands) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = _Parser(prog="bnnpp", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands:
        importlib.import_module(f"bnnpp.cli.{name}").add_parser(sub)
    return parser, sub


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser (every command's flags), or, with ``only``, one with that command's
    flags and the others listed by name (so only ``bnnpp.cli.<only>`` is imported)."""
    if only is None:
        return _parser(COMMANDS)[0]
    parser, sub = _parser([only])
    for name, text in COMMANDS.items():
        if name != only:
            sub.add_parser(name, help=text)
    return parser


def _light_parser() -> argparse.ArgumentParser:
    """The command list alone, for ``bnnpp``, ``bnnpp --help`` and a mistyped command."""
    parser = _Parser(prog="bnnpp", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in COMMANDS.items():
        sub.add_parser(name, help=text)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bnnpp`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        _light_parser().parse_args(argv)  # prints the help or the error, and exits
        return 2  # not reached: argparse exits on a missing or unknown command
    parser = build_parser(only=command)
    try:
        expanded = config.expand_argv(parser, argv)  # --config FILE: its options, overridden by the flags typed
    except ValueError as e:
        print(f"bnnpp {command}: error: {e}", file=sys.stderr)
        return 2
    _Parser.config_file = _config_path(argv)
    try:
        args = parser.parse_args(expanded)
    finally:
        _Parser.config_file = None
    args.argv = argv  # to print the command that resumes a fit
    args.import_seconds = time.perf_counter() - sys.modules["bnnpp"]._IMPORT_START
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
