"""Hyperparameters by evidence (``hyperparameters="evidence"``, bnnpp.inference.evidence):
on Bayesian linear regression the Laplace evidence is exact, so the online updates must
land on the maximiser of the exact log marginal likelihood (plus the hyperpriors)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.stats

import bnnpp
from bnnpp import priors
from bnnpp.inference import evidence

A, B, NOISE_SCALE = 0.5, 0.5, 10.0  # weak hyperpriors: IG(a, b) on the prior variance, HalfNormal on σ


def _data(n=100, seed=0):
    """Centred, orthogonal input columns (X̃ᵀX̃ = n I with the bias column), so the GGN's
    diagonal is the whole GGN and ``diag`` is exact too."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(np.c_[np.ones(n), rng.normal(size=(n, 3))])
    x = (q[:, 1:] * np.sqrt(n)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5, 0.25]) + 0.3 + rng.normal(0, 0.5, n)).astype(np.float32)
    return x, y


def _truth(x, y):
    """argmax over (v, σ) of log N(y | 0, σ² I + v X̃X̃ᵀ) + log IG(v; a, b) + log HalfNormal(σ)
    + log v + log σ (the hyperpriors as densities of the unconstrained log v, log σ)."""
    xa = np.c_[np.ones(len(x)), x].astype(np.float64)
    yd = y.astype(np.float64)

    def neg(p):
        v, s = np.exp(p)
        c = s**2 * np.eye(len(y)) + v * xa @ xa.T
        ll = scipy.stats.multivariate_normal(np.zeros(len(y)), c).logpdf(yd)
        return -(ll + scipy.stats.invgamma(A, scale=B).logpdf(v) + scipy.stats.halfnorm(scale=NOISE_SCALE).logpdf(s) + p.sum())

    return np.exp(scipy.optimize.minimize(neg, np.zeros(2), method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10}).x)


@pytest.mark.slow  # about 2 minutes each on the shared 2-core CPU (3,000 steps with 60 evidence updates)
@pytest.mark.parametrize("structure", ["full", "diag"])
def test_online_evidence_reaches_the_exact_evidence_optimum(structure, monkeypatch):
    """The fixed point of the online updates (weights at their MAP given h, h at the evidence's
    maximum given the weights) is the exact maximiser for a linear-Gaussian model. Tolerance:
    the variance 5%, σ 2% — the weights move by Adam 1e-2 between updates and the final
    hyper step is Adam's (rate 0.1) on a flat optimum."""
    if structure == "diag":
        monkeypatch.setattr(evidence, "FULL_LIMIT", 0)
    x, y = _data()
    model = bnnpp.models.mlp((), standardize=False, likelihood="gaussian", noise=None, noise_scale=NOISE_SCALE,
                             prior=priors.normal(scale=priors.inverse_gamma(A, B)))
    post = bnnpp.fit(model, (x, y), method="map", hyperparameters="evidence", num_steps=3000, progress=False)
    v, s = _truth(x, y)
    np.testing.assert_allclose(float(post.samples["dense_0.variance"].ravel()[0]), v, rtol=0.05)
    np.testing.assert_allclose(float(post.samples["noise"].ravel()[0]), s, rtol=0.02)


def test_evidence_refuses_a_model_without_hyperparameters_in_one_line():
    x, y = _data(20)
    model = bnnpp.models.mlp((), standardize=False, likelihood="gaussian", noise=0.5, prior=priors.normal(1.0))
    with pytest.raises(ValueError, match="hyperparameters='map'"):
        bnnpp.fit(model, (x, y), method="map", hyperparameters="evidence", num_steps=10, progress=False)
