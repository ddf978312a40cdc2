"""Typed records of what the commands report: a fit run's ``metrics.json`` (:class:`FitReport`),
``bnnpp compare``'s ``compare.json`` (:class:`CompareResult`) and an image evaluation's
``evaluation.json`` (:class:`EvaluationReport`).

Each record's :meth:`to_json` gives the dict written to disk, with its keys in a fixed order
(the file format), and ``from_json`` reads one back. Tables inside them (a
method's scores, the test metrics) stay dicts keyed by metric name. For code written against
the dicts, a record also answers ``record["key"]``, ``record.get("key")``, ``"key" in record``
and ``{**record}`` from :meth:`to_json` (read-only: set attributes to change one).

The public functions that returned these dicts still do (:func:`bnnpp.compare.compare_methods`,
:func:`bnnpp.evaluation.evaluate`, :func:`bnnpp.runs.fit_report`, :func:`bnnpp.runs.evaluate_run`:
callers ``json.dump`` them); :func:`bnnpp.runs.fit_record` and
:func:`bnnpp.evaluation.evaluation_report` give the records, which the run writers, the
Markdown of :mod:`bnnpp.reports` and the CLI read by attribute.

This module imports nothing from bnnpp, so any module (:mod:`bnnpp.reports` included) may use it.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ABSENT", "CompareResult", "EvaluationReport", "FitReport"]


class _Absent:
    """The value of an optional entry that is left out of the JSON (``None`` is written as null)."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()
"""An optional field that :meth:`to_json` leaves out."""


class _JsonView(abc.ABC):
    """Read access by JSON key, for callers of the dicts these records replace."""

    @abc.abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The record's JSON dict (every record defines it)."""

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.to_json()

    def keys(self):
        return self.to_json().keys()

    def items(self):
        return self.to_json().items()


def _present(pairs) -> dict[str, Any]:
    """The ``(key, value)`` pairs whose value is not :data:`ABSENT`, in order."""
    return {k: v for k, v in pairs if v is not ABSENT}


@dataclass(eq=False)
class FitReport(_JsonView):
    """A fit run's ``metrics.json`` (:func:`bnnpp.runs.fit_report`, :func:`bnnpp.runs.write_fit_run`).

    Attributes:
        record: the data record (how to reload the data; :func:`bnnpp.runs.dataset_from_record`),
            written first, key by key.
        method, model, options, seed: the fit (``model`` its spec; ``options`` as it ran).
        steps_run, stopped_at: steps done; the step of a NaN/inf stop or ``None``.
        test: test metrics by name (:func:`bnnpp.runs.metrics_on_test_set`).
        fit_info: divergences, batches, parameters, PSIS k̂ ... by name.
        health: the fit's FitHealthWarning lines.
        val_error, curves, collapse_warning, overconfidence_warning, suitability_warning, placement: written only when set (not :data:`ABSENT`).
        seconds: timings by name, in the order recorded.
        files: the file names written (set by :func:`bnnpp.runs.write_fit_run`).
    """

    record: dict[str, Any]
    method: str
    model: dict[str, Any]
    options: dict[str, Any]
    seed: int
    steps_run: int | None
    stopped_at: int | None
    test: dict[str, Any]
    fit_info: dict[str, Any]
    health: list[str]
    val_error: Any = ABSENT
    curves: Any = ABSENT
    collapse_warning: Any = ABSENT
    overconfidence_warning: Any = ABSENT
    suitability_warning: Any = ABSENT
    placement: Any = ABSENT
    seconds: dict[str, float] = field(default_factory=dict)
    files: Any = ABSENT

    _KEYS = (
        "method",
        "model",
        "options",
        "seed",
        "steps_run",
        "stopped_at",
        "test",
        "fit_info",
        "health",
        "val_error",
        "curves",
        "collapse_warning",
        "overconfidence_warning",
        "suitability_warning",
        "placement",
        "seconds",
        "files",
    )

    def to_json(self) -> dict[str, Any]:
        """``metrics.json``'s dict: the record's keys, then the fit's."""
        return {**self.record, **_present((k, getattr(self, k)) for k in self._KEYS)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FitReport:
        """The record of a ``metrics.json`` dict: the keys before ``method`` are the data record
        (``seed`` among them keeps its place); entries added later that are not the fit's (a
        calibration) join the record, after its own keys."""
        keys = list(d)
        first = keys.index("method") if "method" in keys else len(keys)
        record = {k: d[k] for k in keys[:first]}
        record.update({k: d[k] for k in keys[first:] if k not in cls._KEYS})
        return cls(record=record, **{k: d[k] for k in cls._KEYS if k in d})


@dataclass(eq=False)
class CompareResult(_JsonView):
    """``compare.json`` (:func:`bnnpp.compare.compare_methods`, :func:`bnnpp.runs.write_compare_run`).

    Attributes:
        methods: method → its row: test scores, convergence, PSIS k̂, LOO, seconds, options.
        ranking: ArviZ's LOO comparison, one dict per method (empty with fewer than two).
        seed, data, task: the fits' seed, the dataset's name and task.
        reference: the reference posterior's check, options and seconds (or :data:`ABSENT`).
        model, data_file, quick: set by ``bnnpp compare``; figures, seconds_total: set when
            the folder is written.
    """

    methods: dict[str, dict[str, Any]]
    ranking: list[dict[str, Any]]
    seed: int
    data: str
    task: str
    reference: Any = ABSENT
    model: Any = ABSENT
    data_file: Any = ABSENT
    quick: Any = ABSENT
    figures: Any = ABSENT
    seconds_total: Any = ABSENT

    def to_json(self) -> dict[str, Any]:
        """``compare.json``'s dict."""
        return _present((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompareResult:
        """The record of a ``compare.json`` dict."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"not a compare.json: unknown keys {', '.join(sorted(unknown))}")
        return cls(**d)


@dataclass(eq=False)
class EvaluationReport(_JsonView):
    """``evaluation.json`` of an image classifier (:func:`bnnpp.evaluation.evaluate`,
    :func:`bnnpp.runs.evaluate_run`).

    Attributes:
        num_samples, tau: draws per prediction; the rejection threshold.
        test: the test set's metrics and listed images; ood: per OOD set its scores.
        selective: the selective-prediction table; seconds: timings by name (both always set
            by :func:`~bnnpp.evaluation.evaluate`).
        figures: the figure file names.
        run_dir, data, method: set (first in the JSON) by :func:`bnnpp.runs.evaluate_run`;
        shift: ``{"n": images scored, "rows": [...]}``, the scores under dataset shift
            (:func:`bnnpp.evaluation.shift.shift_report`'s rows), when asked for.
        skipped: OOD sets it skipped, and why (last in the JSON).
    """

    num_samples: int
    tau: float
    test: dict[str, Any]
    ood: dict[str, Any]
    selective: Any = ABSENT
    seconds: Any = ABSENT
    figures: list[str] = field(default_factory=list)
    run_dir: Any = ABSENT
    data: Any = ABSENT
    method: Any = ABSENT
    skipped: Any = ABSENT
    shift: Any = ABSENT

    _ORDER = ("run_dir", "data", "method", "num_samples", "tau", "test", "selective", "ood", "shift", "seconds", "figures", "skipped")

    def to_json(self) -> dict[str, Any]:
        """``evaluation.json``'s dict."""
        return _present((k, getattr(self, k)) for k in self._ORDER)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EvaluationReport:
        """The record of an ``evaluation.json`` dict of an image run."""
        unknown = set(d) - set(cls._ORDER)
        if unknown:
            raise ValueError(f"not an image evaluation.json: unknown keys {', '.join(sorted(unknown))}")
        return cls(**d)
