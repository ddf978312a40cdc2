"""bnnpp.diagnostics: convergence summaries, the variational checks and LOO — each checked on
cases whose answer is known, including cases built to fail."""

from __future__ import annotations

import arviz as az
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp import diagnostics
from bnnpp.introspection import SiteInfo
from bnnpp.posterior import Posterior
from bnnpp.posterior.arviz_compat import arviz_major, group_names


def _posterior(samples: dict, info: dict | None = None, model=None, x=None, y=None) -> Posterior:
    sites = {k: SiteInfo(v.shape[2:], tuple(f"{k}_dim_{i}" for i in range(v.ndim - 2))) for k, v in samples.items()}
    x = np.zeros((1, 1), np.float32) if x is None else x
    y = np.zeros((1,), np.float32) if y is None else y
    return Posterior(samples, {"method": "test", "seed": 0, "options": {}, **(info or {})}, model, x, y, sites)


# -- summary ---------------------------------------------------------------------------------


def test_summary_flags_chains_that_disagree():
    """Two chains of a scale site centred at 1 and at 3: R-hat far above 1.01; the same draws
    pooled and reshuffled into two chains: R-hat ≈ 1. The check can fail and pass."""
    rng = np.random.default_rng(0)
    apart = np.stack([rng.normal(1.0, 0.1, 500), rng.normal(3.0, 0.1, 500)])
    mixed = rng.permutation(apart.ravel()).reshape(2, 500)
    w = rng.normal(size=(2, 500, 3, 2))
    bad = diagnostics.summary(_posterior({"dense_0.scale": np.abs(apart), "dense_0.w": w}))
    good = diagnostics.summary(_posterior({"dense_0.scale": np.abs(mixed), "dense_0.w": w}))
    assert bad["scales"]["dense_0.scale"]["r_hat"] > 1.5
    assert bad["max_r_hat"] == bad["scales"]["dense_0.scale"]["r_hat"]
    assert good["scales"]["dense_0.scale"]["r_hat"] < 1.01
    assert good["weights"]["count"] == 6 and good["weights"]["max_r_hat"] < 1.02
    assert good["weights"]["share_r_hat_above_1.01"] <= 0.5
    assert good["predictive"] is None  # no model to predict with


def test_summary_one_chain_has_ess_but_no_rhat():
    rng = np.random.default_rng(1)
    s = diagnostics.summary(_posterior({"dense_0.variance": rng.gamma(2.0, size=(1, 400))}))
    row = s["scales"]["dense_0.variance"]
    assert row["r_hat"] is None and s["max_r_hat"] is None
    assert 250 < row["ess_bulk"] < 600  # independent draws: ESS ≈ number of draws


def test_summary_of_a_map_fit_is_undefined_not_wrong(moons):
    model = bnnpp.models.mlp((3,), num_classes=2)
    post = bnnpp.fit(model, moons, method="map", num_steps=20, progress=False)
    s = diagnostics.summary(post)
    assert s["max_r_hat"] is None and s["weights"] is None and "undefined" in s["note"]


def test_summary_predictive_is_permutation_invariant(moons):
    """Swap the hidden units of chain 1 (a relabelling that leaves the network's function
    unchanged): weight R-hat explodes, predictive R-hat does not notice."""
    model = bnnpp.models.mlp((4,), num_classes=2)
    # the plain-SGLD chain this test was written on (the defaults became psgld from a Glorot start)
    post = bnnpp.fit(model, moons, method="sgld", num_chains=1, num_samples=200, burn_in=300, thinning=2, progress=False,
                     variant="sgld", init_loc="uniform")
    res = diagnostics.loo(post)  # while we have a fit with many draws: loo is ArviZ's PSIS-LOO
    assert res["pareto_k"].shape == (len(moons.y_train),) and res["max_khat"] == res["pareto_k"].max()
    ref = az.loo(post.to_arviz())
    assert res["elpd"] == pytest.approx(float(ref.elpd if arviz_major() >= 1 else ref.elpd_loo), rel=1e-9)
    # chain 2 = the same draws in another order with the hidden units relabelled: both
    # chains then sample the same distribution of functions (shuffling in time removes any
    # drift that split R-hat would rightly flag)
    rng = np.random.default_rng(0)
    order = rng.permutation(200)
    one = {k: v[0] for k, v in post.samples.items()}
    two_in_time = {k: v[order] for k, v in one.items()}
    perm = np.array([3, 2, 1, 0])
    shuffle = rng.permutation(200)  # one permutation for every site: draws stay joint
    one = {k: v[shuffle] for k, v in one.items()}
    t = two_in_time
    two = {
        "dense_0.w": np.stack([one["dense_0.w"], t["dense_0.w"][..., perm]]),
        "dense_0.b": np.stack([one["dense_0.b"], t["dense_0.b"][..., perm]]),
        "dense_1.w": np.stack([one["dense_1.w"], t["dense_1.w"][:, perm, :]]),
        "dense_1.b": np.stack([one["dense_1.b"], t["dense_1.b"]]),
    }
    permuted = Posterior(two, post.info, model, post.x, post.y, post.sites)
    s = diagnostics.summary(permuted)
    assert s["weights"]["max_r_hat"] > 1.5
    assert s["predictive"]["max_r_hat"] < 1.01  # the same functions in both chains
    assert s["predictive"]["count"] == 20 * 2


# -- variational checks ------------------------------------------------------------------------


def test_elbo_convergence_reads_flat_and_falling_traces():
    rng = np.random.default_rng(0)
    flat = 100 + rng.normal(0, 1, 2000).astype(np.float32)
    falling = np.linspace(200, 100, 2000).astype(np.float32)
    assert diagnostics.elbo_convergence(_posterior({"a": np.zeros((1, 2))}, {"loss": flat}))["converged"]
    res = diagnostics.elbo_convergence(_posterior({"a": np.zeros((1, 2))}, {"loss": falling}))
    assert not res["converged"] and res["relative_change"] > 0.01
    with pytest.raises(ValueError, match="no loss trace"):
        diagnostics.elbo_convergence(_posterior({"a": np.zeros((1, 2))}))


def _gaussian_linreg(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    numpyro.sample("y", dist.Normal(x @ w, 0.5), obs=y)


def _funnel(x, y=None):
    # Neal's funnel; the observation carries no information about v or z
    v = numpyro.sample("v", dist.Normal(0.0, 3.0))
    numpyro.sample("z", dist.Normal(0.0, jnp.exp(v / 2)).expand([9]).to_event(1))
    numpyro.sample("y", dist.Normal(jnp.zeros(x.shape[0]), 1.0), obs=y)


def test_psis_khat_separates_gaussian_from_funnel():
    """Yao et al. (2018): k̂ < 0.7 when mean-field ADVI meets a (near-independent) Gaussian
    posterior, k̂ > 0.7 on Neal's funnel, whose scale–location dependence no mean-field
    Gaussian can follow."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + rng.normal(0, 0.5, 200)).astype(np.float32)
    opts = {"num_steps": 3000, "num_samples": 10, "learning_rate": 1e-2}
    good = diagnostics.psis_khat(bnnpp.fit(_gaussian_linreg, (x, y), method="advi", progress=False, **opts))
    funnel = bnnpp.fit(_funnel, (np.zeros((1, 1), np.float32), np.zeros(1, np.float32)), method="advi", progress=False, **opts)
    bad = diagnostics.psis_khat(funnel)
    assert good["khat"] < 0.5 and good["reading"].startswith("good")
    assert bad["khat"] > 0.7 and bad["reading"].startswith("not trustworthy")


def test_psis_khat_rejects_non_variational_fits(moons):
    post = bnnpp.fit(bnnpp.models.mlp((3,), num_classes=2), moons, method="map", num_steps=10, progress=False)
    with pytest.raises(ValueError, match="mean-field Gaussian"):
        diagnostics.psis_khat(post)


# -- LOO ------------------------------------------------------------------------------------------


def test_loo_errors_name_the_fix(moons, tmp_path):
    model = bnnpp.models.mlp((3,), num_classes=2)
    post = bnnpp.fit(model, moons, method="map", num_steps=10, progress=False)
    with pytest.raises(ValueError, match="several posterior draws"):
        diagnostics.loo(post)
    idata = post.to_arviz()
    assert "log_likelihood" not in group_names(idata)  # one draw: PSIS-LOO is undefined, so to_arviz leaves it out
    with pytest.raises(ValueError, match="log_likelihood group"):
        diagnostics.loo(idata)
    post.save(tmp_path / "p.nc", include_data=False)
    back = bnnpp.load(tmp_path / "p.nc")
    assert back.x.shape == (0, 2) and "log_likelihood" not in group_names(back.to_arviz())
    with pytest.raises(ValueError, match="include_data=True"):
        diagnostics.loo(back)
    np.testing.assert_allclose(back.predict(moons.x_test[:5]).probs, post.predict(moons.x_test[:5]).probs, rtol=1e-6)


def test_loo_is_finite_when_draws_disagree_by_hundreds_of_nats():
    # A linear-Gaussian model whose 40 draws of the slope spread over ±30: the pointwise
    # log-likelihoods then differ by far more than the ~88 nats a float32 exp can resolve.
    # PSIS on float32 values divided by a zero tail quantile (NaN elpd, as multiswag on the
    # sinusoid); the group is float64, so the estimate is finite (and, honestly, bad: k̂ > 0.7).
    model = bnnpp.models.mlp((), standardize=False, likelihood="gaussian", noise=1.0)
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (20, 1)).astype(np.float32)
    y = (2.0 * x[:, 0] + rng.normal(0, 1, 20)).astype(np.float32)
    w = np.linspace(-30, 30, 40, dtype=np.float32).reshape(1, 40, 1, 1)
    post = _posterior({"dense_0.w": w, "dense_0.b": np.zeros((1, 40, 1), np.float32)}, model=model, x=x, y=y)
    ll = post.to_arviz().log_likelihood["y"]
    assert ll.dtype == np.float64 and float(ll.max() - ll.min()) > 1000
    res = diagnostics.loo(post)
    assert np.isfinite(res["elpd"]) and np.isfinite(res["se"]) and res["max_khat"] > 0.7
