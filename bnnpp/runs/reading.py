"""Reading a fit run back: its folder checked, its data reloaded from the data record, its
posterior loaded (:func:`open_run`)."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from bnnpp import data
from bnnpp.data import IMAGE_SETS, SYNTHETIC
from bnnpp.inference import load


def dataset_from_record(record: dict, shard: tuple[int, int] | None = None) -> data.Dataset:
    """Reload the dataset of a ``bnnpp fit`` run from its data record (the ``metrics.json`` dict).

    Uses the keys ``data`` and, for mnist/fashion_mnist, ``data_dir`` (``None``: the default
    search of :func:`bnnpp.data.load`), ``normalize``, ``validation``, ``flatten`` and
    ``train_subset``; for the generated sets ``data_noise`` and ``seed``; for a user's file
    (``data`` its absolute path) ``sha256``, ``target``, ``task``, ``test_fraction`` and
    ``seed`` — the file is read again (:func:`bnnpp.data.from_file`) and refused when its
    SHA-256 differs, so the run folder stays small whatever the data's size.

    ``shard=(process, processes)``: only that process's block of the training rows (a
    multi-process fit; see :mod:`bnnpp.data`).

    Returns:
        The :class:`bnnpp.data.Dataset` the run trained and was tested on (training split cut
        to ``train_subset`` rows when set). Raises ValueError when the data cannot be found.
    """
    name = record.get("data")
    if name in IMAGE_SETS:
        subset = record.get("train_subset")
        ds = data.load(
            name,
            record.get("data_dir"),
            normalize=record.get("normalize", "255"),
            validation=record.get("validation", 10000),
            flatten=bool(record.get("flatten", False)),
            **({} if shard is None else {"shard": shard, "train_subset": subset}),
        )
        if subset is not None and shard is None:
            if subset > len(ds.x_train):
                raise ValueError(f"--train-subset {subset} exceeds the {len(ds.x_train)} training images; use at most {len(ds.x_train)}")
            ds = dataclasses.replace(ds, x_train=ds.x_train[:subset], y_train=ds.y_train[:subset])
        return ds
    if name in SYNTHETIC:
        noise = record.get("data_noise")
        return data.load_synthetic(name, seed=record.get("seed", 0), shard=shard, **({} if noise is None else {"noise": noise}))
    if "sha256" in record:  # a user's file: read again, and refused if its bytes changed
        path = record["data"]
        if not os.path.isfile(path):
            raise ValueError(f"the run's data file {path} is gone: put it back (the run recorded its SHA-256)")
        if data.file_sha256(path) != record["sha256"]:
            raise ValueError(f"the run's data file {path} changed since the run was fitted (SHA-256 differs): fit again")
        return data.from_file(
            path,
            record.get("target"),
            task=record.get("task"),
            test_fraction=record.get("test_fraction", 0.2),
            seed=record.get("seed", 0),
            shard=shard,
        )
    raise ValueError(f"the report names no known dataset (data={name!r}); known: {', '.join([*SYNTHETIC, *IMAGE_SETS])}")


def check_run_dir(run_dir: str | os.PathLike, *, images: bool = True) -> tuple[str, dict]:
    """Check that ``run_dir`` is a ``bnnpp fit`` run (with ``images``, of an image set),
    reading no posterior and no data (cheap, for up-front checks).

    Returns:
        ``(path, report)``: the folder as a ``str`` and its ``metrics.json`` dict. Raises
        ValueError naming what is missing or wrong.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"{run_dir} is not a folder: pass the --out folder of `bnnpp fit`")
    if not os.path.isfile(os.path.join(run_dir, "posterior.nc")):
        raise ValueError(f"{run_dir} holds no posterior.nc: pass a folder written by `bnnpp fit --out DIR`")
    path = os.path.join(run_dir, "metrics.json")
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir} holds no metrics.json, which records the run's data: fit it again with `bnnpp fit`")
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}): fit the run again") from None
    if not isinstance(report, dict):
        raise ValueError(f"{path} holds a JSON {type(report).__name__}, not the object `bnnpp fit` writes: fit the run again")
    if images and report.get("data") not in IMAGE_SETS:
        raise ValueError(
            f"{run_dir} was fitted to {report.get('data')!r}; this command works on image runs "
            f"({', '.join(IMAGE_SETS)}): fit one with `bnnpp fit --data mnist ...`"
        )
    return run_dir, report


def open_run(run_dir: str | os.PathLike, data_dir: str | os.PathLike | None = None):
    """Load a ``bnnpp fit`` image run.

    Args:
        run_dir: the run folder (``posterior.nc``, ``metrics.json``).
        data_dir: where the IDX files are, overriding the folder recorded in ``metrics.json``.

    Returns:
        ``(posterior, report, dataset)``: the :class:`~bnnpp.Posterior`, the ``metrics.json``
        dict (with ``data_dir`` replaced when given) and the run's :class:`~bnnpp.data.Dataset`.
    """
    run_dir, report = check_run_dir(run_dir)
    if data_dir is not None:
        if not os.path.isdir(data_dir):
            raise ValueError(f"--data-dir {data_dir} is not a folder")
        report = dict(report, data_dir=os.path.abspath(data_dir))
    dataset = dataset_from_record(report)
    posterior = load(os.path.join(run_dir, "posterior.nc"))
    if tuple(posterior.x.shape[1:]) != tuple(dataset.x_test.shape[1:]):
        raise ValueError(
            f"the posterior takes inputs of shape {posterior.x.shape[1:]} but the recorded data has {dataset.x_test.shape[1:]}: "
            "metrics.json does not belong to posterior.nc"
        )
    return posterior, report, dataset


def fashion_like(report: dict, dataset: data.Dataset) -> np.ndarray:
    """The Fashion-MNIST test images, normalised and shaped like the run's MNIST inputs.

    Looked up in a folder named ``fashion_mnist`` inside the run's ``data_dir`` or beside it
    (``shared/data/mnist`` → ``shared/data/fashion_mnist``; never the MNIST folder itself,
    whose files have the same names), else by the default search of
    :func:`bnnpp.data.load`. With ``normalize="standardize"`` the MNIST training mean and sd
    are applied (not Fashion-MNIST's own), so both sets go through the same transformation.

    Returns:
        float32 ``(10000, *dataset.x_test.shape[1:])``.
    """
    d = report.get("data_dir")
    candidates = [os.path.join(p, "fashion_mnist") for p in (d, os.path.dirname(os.path.abspath(d)))] if d else []
    candidates = [c for c in candidates if os.path.isdir(c)] or [None]
    normalize, flatten = report.get("normalize", "255"), bool(report.get("flatten", False))
    errors = []
    for folder in candidates:
        try:
            raw = data.load(
                "fashion_mnist", folder, normalize="255" if normalize == "standardize" else normalize, validation=0, flatten=flatten
            )
            break
        except ValueError as e:
            errors.append(str(e))
    else:
        raise ValueError("; ".join(errors))
    x = raw.x_test
    if normalize == "standardize":  # the run's own shift and scale, in units of pixel/255
        ref = data.load(report["data"], d, normalize="255", validation=report.get("validation", 10000), flatten=flatten)
        mean, sd = ref.x_train.mean(dtype=np.float64), ref.x_train.std(dtype=np.float64)
        x = ((x - np.float32(mean)) / np.float32(sd)).astype(np.float32)
    if x.shape == dataset.x_test.shape and np.array_equal(x[:10], dataset.x_test[:10]):
        raise ValueError("the Fashion-MNIST files found hold the run's own test images; put the real ones in a fashion_mnist folder")
    return x
