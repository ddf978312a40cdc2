"""Dataset-shift transforms and the affine map back to a run's inputs
(:mod:`bnnpp.evaluation.shift`); the report itself is tested end to end in
tests/test_cli_evaluate.py."""

from __future__ import annotations

import numpy as np
import pytest

from bnnpp.evaluation.shift import affine_map, shifted, shifts


@pytest.fixture
def images():
    rng = np.random.default_rng(0)
    im = np.zeros((3, 28, 28), np.float32)
    im[:, 4:10, 6:20] = rng.uniform(0.5, 1.0, (3, 6, 14))  # an off-centre bar: rotations move it
    return im


def test_rotations_are_exact_at_multiples_of_90(images):
    np.testing.assert_array_equal(shifted(images, "rotation", 0.0), images)
    np.testing.assert_allclose(shifted(images, "rotation", 180.0), images[:, ::-1, ::-1], atol=1e-5)
    np.testing.assert_allclose(shifted(images, "rotation", 90.0), np.rot90(images, 1, axes=(1, 2)), atol=1e-5)


def test_corruptions(images):
    np.testing.assert_allclose(shifted(images, "contrast", 0.3), 0.5 + 0.3 * (images - 0.5), rtol=1e-6)
    noisy = shifted(images, "noise", 0.5, seed=1)
    assert noisy.min() >= 0 and noisy.max() <= 1 and not np.allclose(noisy, images)
    np.testing.assert_array_equal(noisy, shifted(images, "noise", 0.5, seed=1))  # seeded
    blurred = shifted(images, "blur", 1.0)
    assert blurred.max() < images.max() and blurred.sum() == pytest.approx(images.sum(), rel=1e-3)  # mass kept away from the border
    assert len(shifts()) == 16 and shifts()[0] == ("rotation", 0.0)
    with pytest.raises(ValueError, match="unknown shift 'fog'"):
        shifted(images, "fog", 1.0)


def test_affine_map_recovers_a_normalisation(images):
    assert affine_map(images, images) == pytest.approx((1.0, 0.0), abs=1e-9)
    mean, sd = 0.13, 0.31
    a, b = affine_map((images - mean) / sd, images)
    assert (a, b) == pytest.approx((1 / sd, -mean / sd), rel=1e-6)
    with pytest.raises(ValueError, match="not an affine function"):
        affine_map(images**2, images)
    with pytest.raises(ValueError, match="not the same images"):
        affine_map(images[:1], images)
