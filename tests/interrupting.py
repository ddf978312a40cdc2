"""Signals sent to the test process in the middle of a fit, for the checkpoint/resume tests."""

from __future__ import annotations

import os
import signal

from bnnpp.inference import runner


def interrupt_after(monkeypatch, chunks: int, signum=signal.SIGINT) -> None:
    """Send ``signum`` to this process while the ``chunks``-th chunk's results are shown
    (patches the runner's drive loop for the rest of the test)."""
    drive = runner._drive
    seen = {"n": 0}

    def patched(*args, **kwargs):
        show = kwargs["postfix"]

        def postfix(info):
            seen["n"] += 1
            if seen["n"] == chunks:
                os.kill(os.getpid(), signum)
            return show(info)

        return drive(*args, **{**kwargs, "postfix": postfix})

    monkeypatch.setattr(runner, "_drive", patched)
