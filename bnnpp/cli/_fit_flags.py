"""``bnnpp fit``'s flags generated from the registered methods, and the parsers of its
comma-separated values."""

from __future__ import annotations

import argparse

from bnnpp.inference.registry import command_line_options

#: Posterior draws kept by default for image data: a large net stores its variational
#: parameters (``info["guide_params"]``) plus this modest number of draws, enough for test
#: metrics and uncertainty (Zharikov, Isachenko & Bochkarev used 100) without a file of 1000 copies of the net.
IMAGE_NUM_SAMPLES = 100
MIN_TEST_DRAWS = 10


def _shown_default(option: str, default) -> str:
    """A method's default in the flag help: ``None`` spelt out where it has a meaning."""
    if default is None:
        return {
            "batch_size": "full batch",
            "num_steps": "unset",
            "epochs": "unset",
            "learning_rate": "step_size",
            "step_size": "by variant",
            "num_chains": "by device",
        }.get(option, "None")
    return str(default)


def method_flags() -> list[tuple[str, str, dict]]:
    """Every inference flag, generated from the registered methods' options dataclasses:
    ``(dest, option, argparse kwargs)``. Only flags the user gives are passed on; a flag whose
    option the chosen method does not take is an error naming the flags it does take. The
    help text lists the methods that take each flag, with their defaults. A switch that some
    method has on by default comes as ``--flag`` and ``--no-flag``; the other switches only turn
    an option on."""
    out = []
    for cli in command_line_options():
        # a switch some method has on by default: --flag / --no-flag, each method's default shown
        on_and_off = cli.type is bool and any(d is True for d in cli.takers.values())
        takers = ", ".join(
            m if isinstance(d, bool) and not on_and_off else f"{m}={_shown_default(cli.option, d)}" for m, d in cli.takers.items()
        )
        kwargs: dict = {"help": f"{cli.help} [{takers}]"}
        if on_and_off:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif cli.type is bool:
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
    if not text.strip():  # an unset shell variable, not a choice: no hidden layers is spelled "none"
        raise argparse.ArgumentTypeError("--hidden is empty: give widths such as 5,5, or none for no hidden layer")
    if text.strip() == "none":
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
