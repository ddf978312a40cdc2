"""``mlp(likelihood=...)``: student_t, poisson, heteroscedastic Gaussian and multi-output
regression, checked against scipy's log-densities at draws from the prior; prediction, scores
and ArviZ output for each."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from numpyro.infer import Predictive
from scipy import stats
from scipy.special import logsumexp

import bnnpp
from bnnpp.introspection import latent_sites
from bnnpp.posterior import Posterior, Prediction

S, N = 30, 25  # prior draws, rows


def _x():
    return np.linspace(-1.5, 1.5, N, dtype=np.float32)[:, None]


@functools.cache
def _prior_posterior(likelihood, outputs=None, df=None, seed=0):
    """A Posterior whose draws are S prior draws of ``mlp((4,), likelihood=...)`` (one chain),
    with targets ``y`` drawn from the prior predictive of the first draw; also every site's
    prior draws. Cached: the tests share the compiled programs of one posterior."""
    model = bnnpp.models.mlp((4,), likelihood=likelihood, outputs=outputs, **({} if df is None else {"df": df}))
    y_shape = (N,) if outputs is None else (N, outputs)
    x = _x()
    draws = Predictive(model, num_samples=S)(jax.random.PRNGKey(seed), x)
    draws = {k: np.asarray(v) for k, v in draws.items()}
    y = draws["y"][0].astype(np.float32)
    assert y.shape == y_shape
    sites = latent_sites(model, x, y)
    samples = {k: draws[k][None] for k in sites}
    post = Posterior(samples, {"method": "prior", "seed": seed, "options": {}}, model, x, y, sites)
    return post, draws, y


def _scipy_logpdf(likelihood, draws, y, df=None):
    """Per draw and element, ``(S, n, ...)``."""
    if likelihood == "poisson":
        return stats.poisson.logpmf(y[None], draws["rate"].astype(np.float64))
    if likelihood == "heteroscedastic":
        return stats.norm.logpdf(y[None], draws["mean"], np.exp(draws["log_sd"].astype(np.float64)))
    sd = draws["noise"].reshape(S, *([1] * y.ndim))
    if likelihood == "student_t":
        return stats.t.logpdf(y[None], df, draws["mean"], sd)
    return stats.norm.logpdf(y[None], draws["mean"], sd)


_SLOW = pytest.mark.slow  # the same code paths as a fast case, another shape
CASES = [
    ("student_t", None, 3.0),
    ("poisson", None, None),
    ("heteroscedastic", None, None),
    ("gaussian", 3, None),
    pytest.param("student_t", 2, 5.0, marks=_SLOW),
    pytest.param("poisson", 2, None, marks=_SLOW),
    pytest.param("heteroscedastic", 2, None, marks=_SLOW),
    pytest.param("gaussian", None, None, marks=_SLOW),
]


@pytest.mark.parametrize(("likelihood", "outputs", "df"), CASES)
def test_log_likelihood_is_scipys(likelihood, outputs, df):
    y_shape = (N,) if outputs is None else (N, outputs)
    post, draws, y = _prior_posterior(likelihood, outputs, df)
    want = _scipy_logpdf(likelihood, draws, y, df)  # (S, n, ...)
    per_row = want.reshape(S, N, -1).sum(-1)
    ll = post.log_likelihood()  # NumPyro's density, one value per row
    assert ll.shape == (1, S, N)
    # float32 network outputs against float64 scipy: relative 1e-4 of each log-density
    np.testing.assert_allclose(ll[0], per_row, rtol=1e-4, atol=1e-3)
    pred = post.predict(post.x)
    assert pred.task == "regression" and pred.draws.shape == (S, *y_shape) and pred.mean.shape == y_shape
    np.testing.assert_allclose(pred.log_density(y), want, rtol=1e-4, atol=1e-3)  # the predictive's own density
    nll = -np.mean(logsumexp(per_row, axis=0) - np.log(S))  # the mixture over draws, per row
    np.testing.assert_allclose(pred.scores(y)["nll"], nll, rtol=1e-4)
    rep = post.posterior_predictive()
    assert rep.shape == (1, S, *y_shape) and np.all(np.isfinite(rep))
    if likelihood == "poisson":
        assert np.all(rep >= 0) and np.all(rep == np.round(rep))
    idata = post.to_arviz()
    assert idata.log_likelihood["y"].shape == (1, S, N) and idata.observed_data["y"].shape == y_shape


def test_aleatoric_sd_of_each_likelihood():
    post, draws, _ = _prior_posterior("student_t", None, 3.0)
    pred = post.predict(post.x)
    want = np.sqrt(np.mean(stats.t.var(3.0, scale=np.broadcast_to(draws["noise"][:, None], (S, N))), axis=0))
    np.testing.assert_allclose(pred.aleatoric_std, want, rtol=1e-5)
    heavy = Prediction("regression", draws=pred.draws, noise=pred.noise, likelihood="student_t", df=np.full_like(pred.df, 1.5))
    assert np.all(np.isinf(heavy.aleatoric_std))  # no variance for df ≤ 2
    post, draws, _ = _prior_posterior("poisson")
    np.testing.assert_allclose(post.predict(post.x).aleatoric_std, np.sqrt(draws["rate"].mean(0)), rtol=1e-5)
    post, draws, _ = _prior_posterior("heteroscedastic")
    np.testing.assert_allclose(post.predict(post.x).aleatoric_std, np.sqrt(np.mean(np.exp(2 * draws["log_sd"]), 0)), rtol=1e-5)


def test_a_spec_round_trips_the_new_settings():
    for m in (bnnpp.models.mlp((3,), likelihood="student_t", df=2.5, outputs=2), bnnpp.models.mlp((3,), likelihood="poisson"),
              bnnpp.models.mlp((3,), likelihood="heteroscedastic"), bnnpp.models.mlp((3,), likelihood="heteroscedastic", sd_link="exp")):
        back = bnnpp.models.from_spec(m.spec())
        assert back.spec() == m.spec() and back.num_outputs == m.num_outputs
    assert bnnpp.models.mlp((3,), likelihood="heteroscedastic").sd_link == "softplus"
    # a heteroscedastic model saved before sd_link existed was fitted under the exp link
    old = {k: v for k, v in bnnpp.models.mlp((3,), likelihood="heteroscedastic").spec().items() if k != "sd_link"}
    assert bnnpp.models.from_spec(old).sd_link == "exp"
    old_gaussian = {k: v for k, v in bnnpp.models.mlp((3,), likelihood="gaussian").spec().items() if k != "sd_link"}
    assert bnnpp.models.from_spec(old_gaussian).sd_link is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"likelihood": "poisson", "noise": 0.1}, "noise= applies only"),
        ({"likelihood": "gaussian", "df": 3.0}, "df= applies only"),
        ({"likelihood": "student_t", "df": -1.0}, "df must be a positive"),
        ({"likelihood": "categorical", "num_classes": 3, "outputs": 2}, "outputs= is the number of regression targets"),
        ({"likelihood": "gaussian", "outputs": 0}, r"outputs must be an integer ≥ 1"),
        ({"likelihood": "laplace"}, "unknown likelihood 'laplace'"),
        ({"likelihood": "gaussian", "sd_link": "exp"}, "sd_link applies only to likelihood='heteroscedastic'"),
        ({"likelihood": "heteroscedastic", "sd_link": "log"}, "unknown sd_link 'log'"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, match):
    with pytest.raises(ValueError, match=match) as err:
        bnnpp.models.mlp((3,), **kwargs)
    assert "\n" not in str(err.value)


def test_targets_that_do_not_fit_are_refused_before_compiling(compile_counter):
    x = _x()
    with pytest.raises(ValueError, match="non-negative integers"):
        bnnpp.fit(bnnpp.models.mlp((3,), likelihood="poisson"), (x, np.full(N, -1.0)), method="map", progress=False)
    before = compile_counter()  # (parsing the options compiled one scalar op the first time; no fit)
    with pytest.raises(ValueError, match="non-negative integers"):
        bnnpp.fit(bnnpp.models.mlp((3,), likelihood="poisson"), (x, np.full(N, 0.5)), method="map", progress=False)
    with pytest.raises(ValueError, match=r"y has shape \(25,\)"):
        bnnpp.fit(bnnpp.models.mlp((3,), outputs=2, likelihood="gaussian"), (x, np.zeros(N)), method="map", progress=False)
    with pytest.raises(ValueError, match=r"y has shape \(25, 1\): pass y.reshape\(-1\)"):
        bnnpp.fit(bnnpp.models.mlp((3,), likelihood="gaussian"), (x, np.zeros((N, 1))), method="map", progress=False)
    assert compile_counter() == before


def test_heteroscedastic_fit_learns_where_the_noise_is():
    """Noise sd 0.05 for x < 0 and 0.5 for x > 0: the fitted log-sd head says so."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (200, 1)).astype(np.float32)
    sd = np.where(x[:, 0] < 0, 0.05, 0.5)
    y = (np.sin(2 * x[:, 0]) + sd * rng.standard_normal(200)).astype(np.float32)
    model = bnnpp.models.mlp((16,), likelihood="heteroscedastic")
    # a small init: from the default radius 2 the log-sd head starts saturated and MAP stalls
    post = bnnpp.fit(model, (x, y), method="map", num_steps=800, learning_rate=0.03, init_radius=0.5, progress=False)
    pred = post.predict(np.array([[-0.5], [0.5]], np.float32))
    low, high = pred.aleatoric_std
    # 100 points per side estimate an sd to about ±7% (1/√(2·100)); MAP's plug-in sd and the
    # net's smooth step between the halves widen that: within a factor 2 of the truth
    assert 0.025 < low < 0.1 and 0.25 < high < 1.0


def test_heteroscedastic_sd_link_exp_is_the_head_exponentiated():
    from numpyro import handlers

    model = bnnpp.models.mlp((), likelihood="heteroscedastic", sd_link="exp")
    x = np.array([[-1.0], [0.0], [2.0]], np.float32)
    w, b = np.array([[0.5, 0.7]], np.float32), np.array([0.1, -0.2], np.float32)
    tr = handlers.trace(handlers.substitute(model, data={"dense_0.w": w, "dense_0.b": b})).get_trace(x, np.zeros(3, np.float32))
    np.testing.assert_allclose(np.asarray(tr["log_sd"]["value"]), x[:, 0] * 0.7 - 0.2, rtol=1e-6, atol=1e-7)


def test_heteroscedastic_sd_is_softplus_of_the_head_and_stays_finite():
    """sd = softplus(h) + 1e-6 for the second head h: at h = 200 an exp link would overflow
    float32 (past 88.7) and the log-likelihood would be nan; softplus keeps it finite."""
    from numpyro import handlers

    model = bnnpp.models.mlp((), likelihood="heteroscedastic")  # linear: h = x·w + b
    x = np.array([[-3.0], [0.0], [2.0]], np.float32)
    y = np.zeros(3, np.float32)
    w, b = np.array([[0.5, 100.0]], np.float32), np.array([0.1, 0.0], np.float32)
    tr = handlers.trace(handlers.substitute(model, data={"dense_0.w": w, "dense_0.b": b})).get_trace(x, y)
    head = x[:, 0].astype(np.float64) * 100.0  # -300, 0, 200
    sd = np.logaddexp(0.0, head) + 1e-6
    np.testing.assert_allclose(np.exp(np.asarray(tr["log_sd"]["value"], np.float64)), sd, rtol=1e-5)
    ll = np.asarray(tr["y"]["fn"].log_prob(y), np.float64)
    assert np.all(np.isfinite(ll))
    np.testing.assert_allclose(ll, stats.norm.logpdf(0.0, x[:, 0] * 0.5 + 0.1, sd), rtol=1e-4)
