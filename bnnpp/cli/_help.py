"""The help formatter of every ``bnnpp`` command."""

from __future__ import annotations

import argparse


class DefaultsOnce(argparse.HelpFormatter):
    """Help that ends with ``(default: X)`` once: not for defaults of ``None``/``False`` (the
    help text says what happens then) nor where the help text already names its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS, False) or not action.option_strings:
            return text
        return text + " (default: %(default)s)"
