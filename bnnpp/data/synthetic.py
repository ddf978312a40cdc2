"""The synthetic sets of the source experiments, generated locally: the 2-D sets follow
Zharikov, Isachenko & Bochkarev (n points, split 70/30 into train and test, features
standardised with the training mean and sd); the 1-D regression set is a noisy sinusoid."""

from __future__ import annotations

import numpy as np

from bnnpp.data.dataset import Dataset, _take


def _check_n(n: int, minimum: int) -> int:
    if int(n) != n or n < minimum:
        raise ValueError(f"n must be an integer ≥ {minimum}, got {n!r}")
    return int(n)


def _check_noise(noise: float) -> float:
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a finite number ≥ 0, got {noise!r}")
    return float(noise)


def _split_standardise(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, name: str) -> Dataset:
    perm = rng.permutation(len(x))
    x, y = x[perm], y[perm]
    n_train = round(0.7 * len(x))
    mu, sd = x[:n_train].mean(0), x[:n_train].std(0)
    x = (x - mu) / sd
    return Dataset(
        x[:n_train].astype(np.float32),
        y[:n_train].astype(np.int32),
        x[n_train:].astype(np.float32),
        y[n_train:].astype(np.int32),
        "classification",
        2,
        name,
    )


def moons(n: int = 1000, noise: float = 0.3, seed: int = 0, *, shard: tuple[int, int] | None = None) -> Dataset:
    """Two interleaving half circles with Gaussian noise of sd ``noise``; labels 0/1.

    Returns a :class:`Dataset` with 70% of the points (700 of 1000) for training (with
    ``shard=(p, P)`` only process ``p``'s block of them, see :mod:`bnnpp.data`).
    """
    n, noise = _check_n(n, 4), _check_noise(noise)
    rng = np.random.default_rng(seed)
    n0 = n // 2
    t0 = np.linspace(0, np.pi, n0)
    t1 = np.linspace(0, np.pi, n - n0)
    outer = np.c_[np.cos(t0), np.sin(t0)]
    inner = np.c_[1 - np.cos(t1), 0.5 - np.sin(t1)]
    x = np.r_[outer, inner] + rng.normal(0.0, noise, (n, 2))
    y = np.r_[np.zeros(n0), np.ones(n - n0)]
    return _take(_split_standardise(x, y, rng, "moons"), shard)


def circles(n: int = 1000, noise: float = 0.2, factor: float = 0.5, seed: int = 0, *, shard: tuple[int, int] | None = None) -> Dataset:
    """A large circle around a smaller one (radius ``factor``) with Gaussian noise; labels 0
    (outer) and 1 (inner). Returns a :class:`Dataset` split 70/30 (``shard``: as :func:`moons`)."""
    n, noise = _check_n(n, 4), _check_noise(noise)
    if not 0 < factor < 1:
        raise ValueError(f"factor must be in (0, 1), got {factor!r}")
    rng = np.random.default_rng(seed)
    n0 = n // 2
    t0 = np.linspace(0, 2 * np.pi, n0, endpoint=False)
    t1 = np.linspace(0, 2 * np.pi, n - n0, endpoint=False)
    x = np.r_[np.c_[np.cos(t0), np.sin(t0)], factor * np.c_[np.cos(t1), np.sin(t1)]]
    x = x + rng.normal(0.0, noise, (n, 2))
    y = np.r_[np.zeros(n0), np.ones(n - n0)]
    return _take(_split_standardise(x, y, rng, "circles"), shard)


def sinusoid(n: int = 32, noise: float = 1.0, seed: int = 0, n_test: int = 300, *, shard: tuple[int, int] | None = None) -> Dataset:
    """y = 10·sin(2πx) + ε, ε ~ N(0, noise²), with ``n`` training x uniform in [−0.5, 0.5].

    The test set is an even grid of ``n_test`` points on [−1.5, 1.5] (with noisy targets), so
    most of it lies outside the training range: uncertainty should grow there.
    Returns a regression :class:`Dataset` with ``x_train`` of shape ``(n, 1)`` and ``x_test`` ``(n_test, 1)`` (``shard``: as :func:`moons`).
    """
    n, noise = _check_n(n, 1), _check_noise(noise)
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-0.5, 0.5, n))
    y = 10 * np.sin(2 * np.pi * x) + rng.normal(0.0, noise, n)
    xt = np.linspace(-1.5, 1.5, n_test)
    yt = 10 * np.sin(2 * np.pi * xt) + rng.normal(0.0, noise, n_test)
    f = np.float32
    return _take(Dataset(x[:, None].astype(f), y.astype(f), xt[:, None].astype(f), yt.astype(f), "regression", None, "sinusoid"), shard)


SYNTHETIC = {"moons": moons, "circles": circles, "sinusoid": sinusoid}


def load_synthetic(name: str, seed: int = 0, **kwargs) -> Dataset:
    """Build a synthetic set by name (``moons``, ``circles``, ``sinusoid``); ``kwargs`` (``n``,
    ``noise``, ``shard``, ...) go to its function."""
    if name not in SYNTHETIC:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(SYNTHETIC)}")
    return SYNTHETIC[name](seed=seed, **kwargs)
