"""Dataset shift for image classifiers (Ovadia et al. 2019, "Can you trust your model's
uncertainty?"): the test images rotated by 0–180° and corrupted by Gaussian noise, Gaussian
blur and reduced contrast at three severities, built from the test images themselves
(scipy.ndimage), and a classifier's accuracy, ECE, NLL and mean uncertainties under each.

* rotation: ``scipy.ndimage.rotate(image, angle, reshape=False, order=1)``, 0, 30, ..., 180°;
* noise: pixels + N(0, s²), s in (0.1, 0.3, 0.5), clipped to [0, 1];
* blur: ``scipy.ndimage.gaussian_filter(image, sigma)``, sigma in (0.5, 1.0, 1.5);
* contrast: ``0.5 + c (pixels − 0.5)``, c in (0.5, 0.3, 0.1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from bnnpp import metrics
from bnnpp.evaluation.predict import _uncertainty_scores, check_count, predict_probs

__all__ = ["CORRUPTIONS", "ROTATIONS", "affine_map", "shift_report", "shifted", "shifts"]

ROTATIONS = (0, 30, 60, 90, 120, 150, 180)
"""Rotation angles in degrees."""
CORRUPTIONS = {"noise": (0.1, 0.3, 0.5), "blur": (0.5, 1.0, 1.5), "contrast": (0.5, 0.3, 0.1)}
"""Corruption → its three severities (noise sd, blur sigma in pixels, contrast factor)."""


def shifts() -> list[tuple[str, float]]:
    """Every ``(kind, level)`` :func:`shift_report` scores, rotations first."""
    return [("rotation", float(a)) for a in ROTATIONS] + [(k, float(v)) for k, levels in CORRUPTIONS.items() for v in levels]


def shifted(images: np.ndarray, kind: str, level: float, seed: int = 0) -> np.ndarray:
    """``images`` ``(n, H, W)`` with pixels in [0, 1] under one shift: float32, same shape.

    Raises:
        ValueError: an unknown ``kind``.
    """
    from scipy import ndimage

    images = np.asarray(images, np.float32)
    if kind == "rotation":
        return np.stack([ndimage.rotate(im, level, reshape=False, order=1) for im in images]).clip(0, 1).astype(np.float32)
    if kind == "noise":
        return (images + np.random.default_rng(seed).normal(0, level, images.shape)).clip(0, 1).astype(np.float32)
    if kind == "blur":
        return np.stack([ndimage.gaussian_filter(im, level) for im in images]).astype(np.float32)
    if kind == "contrast":
        return (0.5 + level * (images - 0.5)).astype(np.float32)
    raise ValueError(f"unknown shift {kind!r}; choose one of rotation, {', '.join(CORRUPTIONS)}")


def affine_map(inputs: np.ndarray, pixels: np.ndarray) -> tuple[float, float]:
    """``(a, b)`` with ``inputs ≈ a · pixels + b``: how a dataset's normalisation maps pixels in
    [0, 1] to the model's inputs (``/255``: (1, 0); standardised: (1/sd, −mean/sd)), fitted by
    least squares over the same images in both forms (any shapes with the same size).

    Raises:
        ValueError: the two are not related by one affine map (not the same images).
    """
    x = np.asarray(inputs, np.float64).ravel()
    p = np.asarray(pixels, np.float64).ravel()
    if x.size != p.size or x.size == 0:
        raise ValueError(f"the inputs ({x.size} numbers) and the pixels ({p.size}) are not the same images")
    a, b = np.polyfit(p, x, 1)
    if not np.allclose(a * p + b, x, atol=1e-3 * max(1.0, float(np.abs(x).max()))):
        raise ValueError("the model's inputs are not an affine function of the pixels: cannot shift them in pixel space")
    return float(a), float(b)


def shift_report(
    posterior,
    images: np.ndarray,
    y: np.ndarray,
    *,
    to_inputs: Callable[[np.ndarray], np.ndarray] = lambda p: p,
    num_samples: int = 30,
    seed: int = 0,
    batch_size: int | None = None,
) -> list[dict[str, Any]]:
    """A classifier's scores on ``images`` ``(n, H, W)`` (pixels in [0, 1]) under every shift of
    :func:`shifts`.

    Args:
        posterior: a fitted classifier :class:`~bnnpp.Posterior`.
        images: test images ``(n, H, W)`` in [0, 1]; y: their labels ``(n,)``.
        to_inputs: maps shifted images ``(n, H, W)`` to the model's inputs (its
            normalisation and shape, e.g. ``lambda p: (p / 1.0).reshape(n, -1)``).
        num_samples: posterior draws per prediction (at most the draws the posterior has).
        seed: the noise corruption's and the prediction's seed.
        batch_size: inputs per prediction call (see :func:`~bnnpp.evaluation.predict_probs`).

    Returns:
        One dict per shift, in :func:`shifts` order: ``shift``, ``level``, ``accuracy``,
        ``ece``, ``nll``, ``mean_entropy``, ``mean_mutual_information``.
    """
    images = np.asarray(images, np.float32)
    y = np.asarray(y)
    if images.ndim != 3 or y.shape != (len(images),):
        raise ValueError(f"shift_report takes images (n, H, W) and labels (n,), got {images.shape} and {y.shape}")
    check_count(num_samples, "num_samples")
    draws = min(num_samples, posterior.num_chains * posterior.num_draws)
    rows = []
    for kind, level in shifts():
        xs = np.asarray(to_inputs(shifted(images, kind, level, seed)), np.float32)
        s = _uncertainty_scores(predict_probs(posterior, xs, num_samples=draws, seed=seed, batch_size=batch_size))
        mean = s["mean_probs"]
        rows.append(
            {
                "shift": kind,
                "level": level,
                "accuracy": metrics.accuracy(mean, y),
                "ece": metrics.ece(mean, y),
                "nll": metrics.nll(mean, y),
                "mean_entropy": float(s["entropy"].mean()),
                "mean_mutual_information": float(s["mutual_information"].mean()),
            }
        )
    return rows
