"""Run configuration files: ``bnnpp fit|compare|sweep --config run.toml``.

A config file is TOML whose keys are the command's option names — the names of
:func:`bnnpp.fit`'s options and of the command's flags with ``_`` for ``-``
(``num_steps = 200``, ``method = "bbb"``, ``hidden = [20, 20]``, ``data = "my.csv"``).
Tables only group keys (``[model]``, ``[inference]``: their names are not part of the key),
except for ``bnnpp compare``, where a table named after a method sets that method's options
(``[nuts] num_samples = 500`` is ``--set nuts.num_samples=500``). Relative paths in ``data``
and ``data_dir`` are relative to the config file's folder.

The file is turned into command-line flags placed before the ones typed, so flags given on
the command line override the file, and every value goes through the same checks as a flag.
``bnnpp fit`` writes the resolved configuration of a run as ``config.toml`` into its folder
(:func:`dumps`), so ``bnnpp fit --config RUN/config.toml --out AGAIN`` repeats it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tomllib
from typing import Any

__all__ = ["PATH_KEYS", "dumps", "expand_argv", "read", "to_argv"]

PATH_KEYS = ("data", "data_dir", "init")
"""Keys whose relative values are read relative to the config file's folder."""


def read(path: str | os.PathLike) -> dict[str, Any]:
    """The TOML table of a config file (UTF-8; a leading byte-order mark is dropped); one-line
    ValueError when missing, in another encoding or not TOML."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no config file {path}")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"config file {path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); TOML must be UTF-8: "
            f"save it as UTF-8, e.g. iconv -f latin1 -t utf-8 {os.path.basename(path)} > fixed.toml"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"config file {path} is not valid TOML: {e}") from None


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """dest → the action of every optional argument (first flag wins)."""
    out: dict[str, argparse.Action] = {}
    for a in parser._actions:  # argparse exposes no public list of a parser's arguments
        if a.option_strings and a.dest not in ("help", "config"):
            out.setdefault(a.dest, a)
    return out


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def to_argv(parser: argparse.ArgumentParser, table: dict[str, Any], *, base: str = ".", command: str = "fit") -> list[str]:
    """The flags that ``table`` (a config file's contents) stands for, for ``parser`` (one
    subcommand's parser). ``base``: the folder relative paths are read from. Raises
    ValueError naming an unknown key and the keys the command takes."""
    actions = _actions(parser)
    argv: list[str] = []
    flat: list[tuple[str, Any]] = []
    for key, value in table.items():
        if isinstance(value, dict):
            if command == "compare" and key not in actions:  # [METHOD] option = value
                for opt, v in value.items():
                    argv += ["--set", f"{key}.{opt}={json.dumps(v)}"]
                continue
            flat += list(value.items())
        else:
            flat.append((key, value))
    for key, value in flat:
        action = actions.get(key)
        if action is None:
            raise ValueError(f"config key {key!r} is not an option of bnnpp {command}; it takes {', '.join(sorted(actions))}")
        flag = action.option_strings[0]
        if key in PATH_KEYS and isinstance(value, str) and os.path.exists(os.path.join(base, value)) and not os.path.isabs(value):
            value = os.path.join(base, value)
        if action.nargs == 0:  # a switch: true sets it; false gives its --no- form, else leaves the default (off)
            if not isinstance(value, bool):
                raise ValueError(f"config key {key!r} is a switch: true or false, got {value!r}")
            off = [o for o in action.option_strings if o.startswith("--no-")] if isinstance(action, argparse.BooleanOptionalAction) else []
            if value:
                argv.append(flag)
            elif off:
                argv.append(off[0])
            continue
        if isinstance(action, argparse._AppendAction) and isinstance(value, list):
            for v in value:
                argv += [flag, _text(v)]
            continue
        argv += [flag, _text(value)]
    return argv


def expand_argv(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with a ``--config FILE`` of its subcommand replaced by the file's flags, put
    before the typed ones (so those override the file). Unchanged without ``--config``."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None or not argv or argv[0] not in sub.choices:
        return argv
    rest, path = [], None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--config" and i + 1 < len(argv):
            path, i = argv[i + 1], i + 2
            continue
        if a.startswith("--config="):
            path = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    if path is None:
        return argv
    table = read(path)
    flags = to_argv(sub.choices[argv[0]], table, base=os.path.dirname(os.path.abspath(path)), command=argv[0])
    return [argv[0], *flags, *rest]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "inf" if v > 0 else "-inf" if v < 0 else "nan"
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)  # a TOML basic string


def dumps(config: dict[str, Any], comment: str = "") -> str:
    """A flat dict of str/int/float/bool/list values as TOML text (``None`` values are left
    out: they mean "the default"). ``comment`` becomes the leading ``#`` lines."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"{k} = {_value(v)}" for k, v in config.items() if v is not None]
    return "\n".join(lines) + "\n"
