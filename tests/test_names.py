"""Names bnnpp uses cannot clash with the model's, and NumPyro models run as NumPyro users
write them: the observed site found by itself, ``y`` by keyword, a PRNG key as seed,
deterministic sites reported, unpredictable likelihoods refused before training, and a file
naming an unknown approximation family refused."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from flax import nnx
from roundtrip_models import data, numpyro_regression

import bnnpp
from bnnpp import priors
from bnnpp.introspection import RESERVED_OBSERVED, latent_sites, targets_keyword
from bnnpp.models import from_flax
from bnnpp.posterior.families import from_guide_params


@pytest.fixture(scope="module")
def clashing_fit():
    x, y, _ = data("numpyro")
    return bnnpp.fit(numpyro_regression, (x, y), method="advi", progress=False, num_steps=30, num_samples=20), x, y


def test_a_model_observing_obs_with_latent_y_chain_draw_scale_reaches_arviz(clashing_fit, tmp_path):
    post, x, y = clashing_fit
    assert set(post.samples) == {"y", "chain", "draw", "scale"} and post.model.observed == "obs"
    idata = post.to_arviz()
    assert idata.log_likelihood["obs"].dims == ("chain", "draw", "_obs")  # the row dim steps aside for the site 'obs'
    assert idata.observed_data["obs"].shape == (24,)
    assert {"_chain", "_draw", "y", "scale", "mean"} <= set(idata.posterior.data_vars)  # ArviZ's own dims keep their names
    np.testing.assert_array_equal(idata.posterior["_chain"].values, post.samples["chain"])
    assert idata.posterior["mean"].shape == (1, 20, 24)  # the deterministic site at the training inputs
    with pytest.warns(UserWarning, match="Pareto"):  # 20 draws: too few to smooth, and it says so
        assert np.isfinite(bnnpp.diagnostics.loo(post).elpd)
    post.save(tmp_path / "p.nc")
    back = bnnpp.load(tmp_path / "p.nc", model=numpyro_regression)
    for k, v in post.samples.items():
        np.testing.assert_array_equal(back.samples[k], v)


def test_sites_named_x_and_like_dims_round_trip(tmp_path):
    def model(x, y=None):
        a = numpyro.sample("x", dist.Normal(0, 1))
        b = numpyro.sample("feature", dist.Normal(0, 1).expand([2]).to_event(1), infer={"dims": ("draw",)})
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(a * x[:, 0] + b[0], 1.0), obs=y)

    x, y, _ = data("numpyro")
    post = bnnpp.fit(model, (x, y), method="advi", num_steps=3, num_samples=4, progress=False)
    idata = post.to_arviz()
    assert idata.posterior["_x"].dims == ("chain", "draw") and idata.constant_data["x"].shape == (24, 2)
    assert idata.posterior["feature"].dims == ("chain", "draw", "_draw")
    post.save(tmp_path / "p.nc")
    back = bnnpp.load(tmp_path / "p.nc", model=model)
    np.testing.assert_array_equal(back.samples["x"], post.samples["x"])
    np.testing.assert_array_equal(back.samples["feature"], post.samples["feature"])


def test_deterministic_sites_are_in_predictions(clashing_fit):
    post, x, _ = clashing_fit
    pred = post.predict(x[:5])
    assert pred.deterministic["mean"].shape == (20, 5)
    np.testing.assert_array_equal(pred.deterministic["mean"], pred.draws)  # the model's mean is the Normal's loc
    assert bnnpp.fit(bnnpp.models.mlp((2,), num_classes=2), (x, (x[:, 0] > 0).astype(int)), method="map", num_steps=3,
                     progress=False).predict(x[:2]).deterministic == {}  # bnnpp's networks: logits are the probs


def test_the_observed_site_is_found_and_chosen_among_several(compile_counter):
    x, y, _ = data("numpyro")

    def two(x, y=None, z=None):
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("a", dist.Normal(w * x[:, 0], 1.0), obs=y)
            numpyro.sample("b", dist.Normal(w, 1.0), obs=jnp.zeros(x.shape[0]))

    before = compile_counter()
    with pytest.raises(ValueError, match=r"observes several sites \(a, b\): pass observed='NAME'"):
        bnnpp.fit(two, (x, y), method="map", num_steps=3, progress=False)
    with pytest.raises(ValueError, match="has no observed site named 'c'"):
        bnnpp.fit(two, (x, y), method="map", num_steps=3, progress=False, observed="c")
    with pytest.raises(ValueError, match="names starting with '__bnnpp_' are bnnpp's"):
        bnnpp.fit(two, (x, y), method="map", num_steps=3, progress=False, observed=RESERVED_OBSERVED)
    assert compile_counter() == before
    post = bnnpp.fit(two, (x, y), method="map", num_steps=3, progress=False, observed="a")
    assert post.to_arviz().observed_data["a"].shape == (24,)


def test_targets_go_by_keyword_when_the_signature_says_so():
    def positional(X, Y, D_H):  # NumPyro's examples/bnn.py
        pass

    def kw_only(x, *, y=None):
        pass

    def after_options(X, D_H=5, Y=None):
        pass

    def by_site(x, n=3, obs=None):
        pass

    def other(x, target=None):
        pass

    assert targets_keyword(functools.partial(positional, D_H=4)) is None
    assert targets_keyword(kw_only) == "y"
    assert targets_keyword(after_options) == "Y"
    assert targets_keyword(by_site) == "obs"
    assert targets_keyword(other) is None  # second positional, whatever its name
    assert targets_keyword(bnnpp.models.mlp((2,), num_classes=2)) is None


def test_a_prng_key_is_a_seed():
    x, y, _ = data("mlp")
    fit = functools.partial(bnnpp.fit, bnnpp.models.mlp((2,), num_classes=2), (x, y), method="advi", num_steps=5, num_samples=3,
                            progress=False)
    by_int, by_key, by_typed = fit(seed=7), fit(seed=jax.random.PRNGKey(7)), fit(seed=jax.random.key(7))
    assert by_key.stats.seed == by_typed.stats.seed == 7
    for k, v in by_int.samples.items():
        np.testing.assert_array_equal(by_key.samples[k], v)
        np.testing.assert_array_equal(by_typed.samples[k], v)
    np.testing.assert_array_equal(by_int.predict(x, seed=jax.random.PRNGKey(2)).probs, by_int.predict(x, seed=2).probs)
    split = fit(seed=jax.random.split(jax.random.PRNGKey(0))[1])
    assert 0 <= split.stats.seed < 2**32
    for bad in ("7", -1, 2.0, jnp.zeros(3)):
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\) or a JAX PRNG key"):
            fit(seed=bad)


def test_a_likelihood_bnnpp_cannot_predict_is_refused_before_training(compile_counter):
    def gamma(x, y=None):
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Gamma(jnp.exp(w * x[:, 0]), 1.0), obs=y)

    x = np.ones((10, 1), np.float32)
    before = compile_counter()
    with pytest.raises(ValueError, match="has a Gamma likelihood, which bnnpp cannot predict with") as err:
        bnnpp.fit(gamma, (x, np.ones(10, np.float32)), method="advi", progress=False)
    assert compile_counter() == before and "\n" not in str(err.value)


def test_a_site_sampled_twice_is_named_not_blamed_on_the_data():
    def twice(x, y=None):
        numpyro.sample("a", dist.Normal(0, 1))
        a = numpyro.sample("a", dist.Normal(0, 1))
        numpyro.sample("y", dist.Normal(a * x[:, 0], 1.0), obs=y)

    with pytest.raises(ValueError, match="samples two sites with one name") as err:
        bnnpp.fit(twice, (np.ones((4, 1), np.float32), np.ones(4, np.float32)), method="map", progress=False)
    assert "training data" not in str(err.value)


class _Norms(nnx.Module):
    def __init__(self, norm, rngs):
        self.hidden = nnx.Linear(2, 4, rngs=rngs)
        self.norm = norm
        self.out = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.norm(self.hidden(x))))


@pytest.mark.parametrize("norm", ["layer", "group"])
def test_flax_norm_layers_under_a_hierarchical_prior(norm):
    rngs = nnx.Rngs(0)
    layer = nnx.LayerNorm(4, rngs=rngs) if norm == "layer" else nnx.GroupNorm(4, num_groups=2, rngs=rngs)
    model = from_flax(_Norms(layer, rngs), num_classes=2, prior=priors.normal(priors.half_cauchy(1.0)))
    x, y, _ = data("mlp")
    sites = latent_sites(model, x, y)
    assert {"norm.scale", "norm.bias", "norm.prior.scale", "hidden.scale"} <= set(sites)  # the module's prior scale steps aside
    post = bnnpp.fit(model, (x, y), method="map", num_steps=5, progress=False)
    assert post.predict(x[:3]).probs.shape == (1, 3, 2)


def test_an_unknown_approximation_family_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown approximation family 'spline_flow'"):
        from_guide_params({"a": np.zeros(2)}, ["a"], "spline_flow")
    x, y, _ = data("mlp")
    post = bnnpp.fit(bnnpp.models.mlp((2,), num_classes=2), (x, y), method="advi", num_steps=5, num_samples=3, progress=False)
    idata = post.to_arviz()
    idata.posterior.attrs["bnnpp"] = idata.posterior.attrs["bnnpp"].replace('"mean_field_gaussian"', '"spline_flow"')
    idata.to_netcdf(tmp_path / "odd.nc")
    with pytest.raises(ValueError, match="unknown approximation family 'spline_flow'") as err:
        bnnpp.load(tmp_path / "odd.nc")
    assert "\n" not in str(err.value)
