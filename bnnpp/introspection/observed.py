"""The targets' keyword of a model and the renaming of its observed site to bnnpp's reserved name."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from numpyro import handlers

from bnnpp.introspection.checks import find_observed
from bnnpp.introspection.sites import _RENAMED_FROM, OBSERVED, RESERVED_OBSERVED, RESERVED_PREFIX, TARGET_KEYWORDS


def targets_keyword(model: Callable, observed: str | None = None) -> str | None:
    """The keyword bnnpp passes the targets by, or ``None`` to pass them as the second
    positional argument: the first parameter after the first named ``y``, ``Y``, ``obs`` or
    ``observed``, unless that parameter is the second positional one (then positional
    works) or its signature cannot be read."""
    try:
        params = list(inspect.signature(model).parameters.values())
    except (TypeError, ValueError):
        return None
    names = {*TARGET_KEYWORDS, *([observed] if observed else [])}
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    if len(positional) >= 2 and positional[1].name in names:
        return None
    for p in params[1:]:
        if p.name in names and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            return p.name
    return None


class RenamedObservation:
    """A NumPyro model as bnnpp calls it, ``model(x, y)``: the targets passed by ``keyword``
    when given (:func:`targets_keyword`), and the observed site ``observed`` traced under the
    reserved name :data:`RESERVED_OBSERVED` when it is not ``"y"``. Made by
    :func:`rename_observed`."""

    def __init__(self, model: Callable, observed: str, keyword: str | None = None):
        self.model = model
        self.observed = observed
        self.keyword = keyword

    def __call__(self, x, y=None, *args, **kwargs):
        def call():
            if self.keyword is not None:
                return self.model(x, *args, **{self.keyword: y}, **kwargs)
            return self.model(x, y, *args, **kwargs)

        if self.observed == OBSERVED:
            return call()
        with _Rename(self.observed, RESERVED_OBSERVED):
            return call()

    def __getattr__(self, name):  # the wrapped model's hints (likelihood, num_classes, input_rank ...)
        if name in ("model", "observed", "keyword", "spec"):  # no spec: the file records a custom model
            raise AttributeError(name)
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"rename_observed({self.model!r}, {self.observed!r})"


class _Rename(handlers.Messenger):
    """Renames the sample site ``old`` to ``new`` before any outer handler sees it."""

    def __init__(self, old: str, new: str):
        self.old, self.new = old, new
        super().__init__()

    def process_message(self, msg):
        if msg["type"] == "sample" and msg["name"] == self.old:
            msg["name"] = self.new
            msg["infer"] = {**(msg.get("infer") or {}), _RENAMED_FROM: self.old}  # read by the model check


def rename_observed(model: Callable, observed: str | None, x=None, y=None) -> Callable:
    """``model`` as bnnpp calls it: itself when its observed site is ``"y"`` and it takes the
    targets as its second positional argument, else a :class:`RenamedObservation`.

    Args:
        model: the NumPyro model (a :class:`RenamedObservation` is unwrapped first).
        observed: the name of its observed site; ``None`` to find it (:func:`find_observed`
            on ``x``, ``y``: the model must observe exactly one site).

    Raises:
        TypeError: ``observed`` is neither ``None`` nor a non-empty string.
        ValueError: ``observed`` is in bnnpp's reserved namespace, or is ``None`` and the
            model observes no site or several.
    """
    if observed is not None and (not isinstance(observed, str) or not observed):
        raise TypeError(f"observed must be the name of the model's observed site, e.g. 'Y', got {observed!r}")
    if observed is not None and observed.startswith(RESERVED_PREFIX):
        raise ValueError(f"observed={observed!r}: names starting with {RESERVED_PREFIX!r} are bnnpp's; rename the site")
    if isinstance(model, RenamedObservation):
        model = model.model
    keyword = targets_keyword(model, observed)
    if observed is None:
        observed = find_observed(RenamedObservation(model, OBSERVED, keyword) if keyword else model, x, y)
    if observed == OBSERVED and keyword is None:
        return model
    return RenamedObservation(model, observed, keyword)
