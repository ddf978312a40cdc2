"""Model mistakes are refused before anything compiles; NumPyro's own BNN example fits as is.

The example model below is NumPyro's ``examples/bnn.py`` ``model`` (pyro-ppl/numpyro, commit
0b935d48), copied unchanged: ``model(X, Y, D_H, D_Y=1)``, observed site ``"Y"`` with targets of
shape ``(N, D_Y)`` and ``.to_event(1)``. bnnpp calls ``model(x, y)`` positionally, so the
hidden width is bound with ``functools.partial`` and the site named with ``observed="Y"``.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import stats
from small_options import SMALL_OPTIONS

import bnnpp
from bnnpp.inference import get_method
from bnnpp.introspection import check_model


def nonlin(x):
    return jnp.tanh(x)


def model(X, Y, D_H, D_Y=1):  # NumPyro's example, verbatim
    N, D_X = X.shape

    # sample first layer (we put unit normal priors on all weights)
    w1 = numpyro.sample("w1", dist.Normal(jnp.zeros((D_X, D_H)), jnp.ones((D_X, D_H))))
    assert w1.shape == (D_X, D_H)
    z1 = nonlin(jnp.matmul(X, w1))  # <= first layer of activations
    assert z1.shape == (N, D_H)

    # sample second layer
    w2 = numpyro.sample("w2", dist.Normal(jnp.zeros((D_H, D_H)), jnp.ones((D_H, D_H))))
    assert w2.shape == (D_H, D_H)
    z2 = nonlin(jnp.matmul(z1, w2))  # <= second layer of activations
    assert z2.shape == (N, D_H)

    # sample final layer of weights and neural network output
    w3 = numpyro.sample("w3", dist.Normal(jnp.zeros((D_H, D_Y)), jnp.ones((D_H, D_Y))))
    assert w3.shape == (D_H, D_Y)
    z3 = jnp.matmul(z2, w3)  # <= output of the neural network
    assert z3.shape == (N, D_Y)

    if Y is not None:
        assert z3.shape == Y.shape

    # we put a prior on the observation noise
    prec_obs = numpyro.sample("prec_obs", dist.Gamma(3.0, 1.0))
    sigma_obs = 1.0 / jnp.sqrt(prec_obs)

    # observe data
    with numpyro.plate("data", N):
        # note we use to_event(1) because each observation has shape (1,)
        numpyro.sample("Y", dist.Normal(z3, sigma_obs).to_event(1), obs=Y)


def _data(n: int = 40, k: int = 1, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.linspace(-1, 1, n, dtype=np.float32)[:, None]
    y = np.sin(3 * x) * np.arange(1, k + 1) + 0.1 * rng.standard_normal((n, k))
    return x, y.astype(np.float32)


def broadcast_mistake(x, y=None):
    """A regression net whose mean is (n, 1) while y is (n,): the likelihood broadcasts to (n, n)."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1], 1]).to_event(2))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, 0.1), obs=y)


def no_event(x, y=None):
    """(n, 2) targets as a batch of n × 2 scalars (no .to_event(1)): two log-densities per row."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1], 2]).to_event(2))
    numpyro.sample("y", dist.Normal(x @ w, 0.1), obs=y)


def whole_vector(x, y=None):
    """All n targets as one event: a single log-density for the data set, none per row (LOO needs them)."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Normal(x @ w, 0.1).to_event(1), obs=y)


def subsampling(x, y=None):
    """Minibatches of 10 from the model's own plate: bnnpp's batch_size would scale them again."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0], subsample_size=10) as i:
        numpyro.sample("y", dist.Normal(w * jnp.asarray(x)[i, 0], 0.1), obs=None if y is None else jnp.asarray(y)[i])


# -- refused before compiling, in one line --------------------------------------------------


@pytest.mark.parametrize(
    ("bad_model", "y_shape", "observed", "match"),
    [
        (functools.partial(model, D_H=3), (40, 1), "y", r"no observed site named 'y' \(its observed site is 'Y'\): leave out observed=, or pass observed='Y'"),
        (broadcast_mistake, (40,), "y", r"broadcasts to \(n, n\)"),
        (no_event, (40, 2), "y", r"to_event\(1\)"),
        (whole_vector, (40,), "y", r"one log-density per row of y.*inside numpyro.plate"),
        (functools.partial(model, D_H=3), (40,), "Y", r"fails on the training data"),  # its own assert: z3.shape == Y.shape
        (functools.partial(model, D_H=3), (40, 1), "Z", r"no observed site named 'Z'"),
        # a model with its own 'y': a name that renames nothing is refused, not ignored
        (bnnpp.models.mlp((3,), likelihood="gaussian", noise=1.0), (40,), "Y", r"no observed site named 'Y' \(its observed site is 'y'\): leave out"),
        (bnnpp.models.mlp((3,), likelihood="gaussian", noise=1.0), (40,), "mean", r"no observed site named 'mean'"),  # a deterministic site
        (subsampling, (40,), "y", r"plate 'data' subsamples \(10 of 40\).*plate\('data', x.shape\[0\]\) and pass batch_size=10"),
    ],
)
def test_model_mistakes_are_refused_before_compiling(bad_model, y_shape, observed, match, compile_counter):
    x, y = _data()
    y = y.reshape(y_shape) if len(y_shape) == 2 and y_shape[1] == 1 else (y[:, 0] if len(y_shape) == 1 else np.repeat(y, 2, 1))
    before = compile_counter()
    with pytest.raises(ValueError, match=match) as err:
        bnnpp.fit(bad_model, (x, y), method="map", num_steps=10, progress=False, observed=observed)
    assert compile_counter() == before  # nothing compiled
    assert "\n" not in str(err.value)


def test_observed_must_be_a_name():
    x, y = _data()
    with pytest.raises(TypeError, match="observed must be the name"):
        bnnpp.fit(functools.partial(model, D_H=3), (x, y), method="map", observed=3)


# -- NumPyro's example fits, predicts and round-trips --------------------------------------------


@pytest.fixture(scope="module")
def example_fit():
    x, y = _data()
    post = bnnpp.fit(functools.partial(model, D_H=4), (x, y), method="advi", progress=False, observed="Y", **SMALL_OPTIONS["advi"])
    return post, x, y


def test_example_log_likelihood_is_the_gaussian_density(example_fit):
    post, x, y = example_fit
    ll = post.log_likelihood()  # (chain, draw, n): one value per row of the (n, 1) targets
    assert ll.shape == (1, 40, 40)
    s = {k: v[0] for k, v in post.samples.items()}
    z3 = np.tanh(np.tanh(x @ s["w1"]) @ s["w2"]) @ s["w3"]  # (draws, n, 1)
    sd = 1.0 / np.sqrt(s["prec_obs"])[:, None, None]
    want = stats.norm.logpdf(y[None], z3, sd).sum(-1)
    np.testing.assert_allclose(ll[0], want, rtol=1e-4, atol=1e-4)  # float32 network vs float64 scipy


def test_example_predicts_and_keeps_its_site_name(example_fit, tmp_path):
    post, x, y = example_fit
    pred = post.predict(x)
    assert pred.draws.shape == (40, 40, 1) and pred.mean.shape == (40, 1) and pred.std.shape == (40, 1)
    assert np.isfinite(pred.scores(y)["nll"])
    idata = post.to_arviz()
    assert idata.observed_data["Y"].shape == (40, 1)
    assert idata.posterior_predictive["Y"].shape == (1, 40, 40, 1)
    assert idata.log_likelihood["Y"].dims == ("chain", "draw", "obs")
    path = tmp_path / "bnn.nc"
    post.save(path)
    back = bnnpp.load(path, model=functools.partial(model, D_H=4))
    np.testing.assert_allclose(back.predict(x).mean, pred.mean, rtol=1e-6)
    assert back.y.shape == (40, 1)
    post.save(tmp_path / "nodata.nc", include_data=False)
    assert bnnpp.load(tmp_path / "nodata.nc", model=functools.partial(model, D_H=4)).y.shape == (0, 1)


def test_load_refuses_a_model_that_does_not_match_the_file(example_fit, tmp_path):
    post, _, _ = example_fit
    path = tmp_path / "bnn.nc"
    post.save(path)
    with pytest.raises(ValueError, match=r"site 'w1' has shape \(1, 5\) in the model but \(1, 4\)") as err:
        bnnpp.load(path, model=functools.partial(model, D_H=5))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"latent sites differ .*missing \['prec_obs', 'w1', 'w2', 'w3'\]"):
        bnnpp.load(path, model=broadcast_mistake)


def test_a_bnnpp_network_file_refuses_another_network(moons, tmp_path):
    post = bnnpp.fit(bnnpp.models.mlp((3,), num_classes=2), moons, method="map", num_steps=10, progress=False)
    post.save(tmp_path / "p.nc")
    with pytest.raises(ValueError, match=r"site 'dense_0.w' has shape \(2, 4\) in the model but \(2, 3\)"):
        bnnpp.load(tmp_path / "p.nc", model=bnnpp.models.mlp((4,), num_classes=2))


LAYER_METHODS = ("mc_dropout", "vd")
"""Methods defined on bnnpp's layers: they refuse a plain NumPyro model in one line."""


@pytest.mark.slow  # every method's compile, about 90 s in all on 2 cores
@pytest.mark.parametrize("method", bnnpp.registered())
def test_numpyro_example_fits_with_every_method(method):
    x, y = _data()
    m = functools.partial(model, D_H=4)
    if method in LAYER_METHODS:  # they act on bnnpp layers (dropout on their inputs): a plain NumPyro model has none
        with pytest.raises(ValueError, match="found none: build the model with bnnpp.models.layers"):
            bnnpp.fit(m, (x, y), method=method, progress=False, observed="Y", **SMALL_OPTIONS[method])
        return
    post = bnnpp.fit(m, (x, y), method=method, progress=False, observed="Y", **SMALL_OPTIONS.get(method, {}))
    pred = post.predict(x)
    assert pred.mean.shape == (40, 1)
    assert pred.scores(y)["rmse"] < float(np.std(y))  # it learned something: better than the constant mean
    assert post.to_arviz().observed_data["Y"].shape == (40, 1)


def test_every_registered_method_has_small_options():
    assert set(SMALL_OPTIONS) == set(bnnpp.registered())
    for m, opts in SMALL_OPTIONS.items():
        get_method(m).parse(opts)  # valid option names and values (the smoke part is checked by register)


def test_a_factor_term_is_not_a_second_observed_site():
    def with_factor(x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0))
        numpyro.factor("penalty", -(w**2))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(w * x[:, 0], 0.5), obs=y)

    x, y = _data()
    assert set(check_model(with_factor, x, y[:, 0])) == {"w"}
