"""The Posterior contract: samples, predict, to_arviz, save/load; custom models."""

from __future__ import annotations

import json

import arviz as az
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp import models, priors
from bnnpp.posterior.arviz_compat import arviz_major, group_names


@pytest.fixture(scope="module")
def post(moons):
    model = models.mlp((5, 5), num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    return bnnpp.fit(model, moons, seed=0, progress=False, num_steps=2000, num_samples=200)


def test_samples_have_chain_draw_axes(post):
    assert post.num_chains == 1 and post.num_draws == 200
    assert post.samples["dense_1.w"].shape == (1, 200, 5, 5)
    assert post.samples["dense_0.variance"].shape == (1, 200)
    assert set(post.info) >= {"method", "options", "loss", "compile_seconds", "run_seconds", "seed"}


def test_predict_shapes_and_subsampling(post, moons):
    pred = post.predict(moons.x_test[:17])
    assert pred.probs.shape == (200, 17, 2) and pred.mean.shape == (17, 2)
    np.testing.assert_allclose(pred.probs.sum(-1), 1.0, rtol=1e-5)
    assert post.predict(moons.x_test[:17], num_samples=50).probs.shape == (50, 17, 2)
    e = pred.entropy
    np.testing.assert_allclose(e, pred.expected_entropy + pred.mutual_information, atol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        post.predict(np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="num_samples"):
        post.predict(moons.x_test, num_samples=0)
    for seed in (-1, "a", 2**32, True):  # as fit's seed: refused in one line (a string was JAX's error, -1 wrapped)
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
            post.predict(moons.x_test[:3], seed=seed)
    with pytest.raises(ValueError, match="seed must be"):
        post.posterior_predictive(seed=-2)


def test_to_arviz_groups_dims_and_loo(post):
    idata = post.to_arviz()
    assert set(group_names(idata)) >= {"posterior", "log_likelihood", "observed_data", "constant_data", "sample_stats"}
    assert idata.posterior["dense_0.w"].dims == ("chain", "draw", "dense_0.in", "dense_0.out")
    assert idata.log_likelihood["y"].shape == (1, 200, 700)
    assert idata.sample_stats["loss"].dims == ("chain", "step")
    assert idata.sample_stats["loss"].shape == (1, 2000)
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd if arviz_major() >= 1 else loo.elpd_loo)  # ArviZ 1.x renamed it
    summary = az.summary(idata, var_names=["dense_0.variance"], kind="stats")
    assert summary.shape[0] == 1


def test_loglik_matches_direct_computation(post, moons):
    ll = post.log_likelihood()
    # recompute for draw 0 from the deterministic logits
    s = {k: v[0, 0] for k, v in post.samples.items()}
    tr = numpyro.handlers.trace(numpyro.handlers.substitute(numpyro.handlers.seed(post.model, 0), data=s)).get_trace(post.x, post.y)
    logits = np.asarray(tr["logits"]["value"], np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(ll[0, 0], logp[np.arange(len(post.y)), post.y], rtol=1e-4, atol=1e-5)


def test_save_load_round_trip(post, moons, tmp_path):
    path = tmp_path / "posterior.nc"
    post.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["posterior.nc"]  # no temporary left behind
    back = bnnpp.load(path)
    for k, v in post.samples.items():
        np.testing.assert_array_equal(back.samples[k], v)
    np.testing.assert_array_equal(back.info["loss"], post.info["loss"])
    assert back.info["method"] == "advi"
    assert back.info["options"] == json.loads(json.dumps(post.info["options"], default=repr))
    assert back.info["guide_params"].keys() == post.info["guide_params"].keys()
    for k, v in post.info["guide_params"].items():
        np.testing.assert_array_equal(back.info["guide_params"][k], v)
    np.testing.assert_allclose(back.predict(moons.x_test).mean, post.predict(moons.x_test).mean, rtol=1e-6)
    idata = az.from_netcdf(path)
    assert idata.posterior.sizes["chain"] == 1 and idata.posterior.sizes["draw"] == 200
    meta = json.loads(idata.posterior.attrs["bnnpp"])
    assert meta["model"]["type"] == "mlp"


def test_load_rejects_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="no posterior file"):
        bnnpp.load(tmp_path / "missing.nc")


def _custom_model(x, y=None):
    """A user-written network with the public dense helper and its own likelihood."""
    p = priors.laplace(priors.half_cauchy(1.0))
    h = models.dense("hidden", x, 4, p)
    out = models.dense("out", jnp.tanh(h), 1, priors.normal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=out[:, 0]), obs=y)


def test_custom_model_fit_predict_save_load(moons, tmp_path):
    post = bnnpp.fit(_custom_model, moons, seed=0, progress=False, num_steps=1500, num_samples=100)
    pred = post.predict(moons.x_test)
    assert pred.probs.shape == (100, 300, 2)
    assert bnnpp.metrics.accuracy(pred.mean, moons.y_test) > 0.75
    assert post.to_arviz().posterior["hidden.w"].dims == ("chain", "draw", "hidden.in", "hidden.out")
    with pytest.raises(ValueError, match=r"save writes a netCDF file; name it .*c\.nc"):
        post.save(tmp_path / "c.json")
    assert not list(tmp_path.iterdir())  # nothing written
    post.save(tmp_path / "c.nc")
    blind = bnnpp.load(tmp_path / "c.nc")
    with pytest.raises(ValueError, match="model=my_model"):
        blind.predict(moons.x_test)
    again = bnnpp.load(tmp_path / "c.nc", model=_custom_model)
    np.testing.assert_allclose(again.predict(moons.x_test).mean, pred.mean, rtol=1e-6)


def test_regression_prediction_decomposes_uncertainty():
    d = bnnpp.data.sinusoid()
    model = models.mlp((10,), likelihood="gaussian", prior=priors.normal(priors.half_normal(1.0)))
    post = bnnpp.fit(model, d, seed=0, progress=False, num_steps=500, num_samples=50)
    pred = post.predict(d.x_test)
    assert pred.draws.shape == (50, 300) and pred.noise.shape == (50, 300) and pred.mean.shape == (300,)
    np.testing.assert_allclose(pred.std**2, pred.epistemic_std**2 + pred.aleatoric_std**2, rtol=1e-5)
    # the aleatoric sd is the learned noise site
    np.testing.assert_allclose(pred.aleatoric_std, np.sqrt(np.mean(post.samples["noise"][0] ** 2)), rtol=1e-5)
    with pytest.raises(AttributeError, match="classification"):
        pred.entropy
