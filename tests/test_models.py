"""The mlp model's documented site names and shapes, and the data plate's scaling."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from numpyro import handlers

from bnnpp import models, priors


def _trace(model, x, y=None, **kw):
    return handlers.trace(handlers.seed(model, jax.random.PRNGKey(0))).get_trace(x, y, **kw)


def _shapes(tr):
    return {k: tuple(v["value"].shape) for k, v in tr.items() if v["type"] in ("sample", "deterministic")}


X = np.zeros((7, 2), np.float32)
Y = np.zeros(7, np.int32)


def test_mlp_sites_fixed_scale():
    tr = _trace(models.mlp((5, 5), num_classes=2), X, Y)
    assert _shapes(tr) == {
        "dense_0.w": (2, 5),
        "dense_0.b": (5,),
        "dense_1.w": (5, 5),
        "dense_1.b": (5,),
        "dense_2.w": (5, 2),
        "dense_2.b": (2,),
        "logits": (7, 2),
        "y": (7,),
    }
    assert tr["y"]["is_observed"]
    assert tr["dense_0.w"]["infer"]["dims"] == ("dense_0.in", "dense_0.out")


@pytest.mark.parametrize(
    "hyper, site",
    [(priors.inverse_gamma(1.0, 1.0), "variance"), (priors.half_normal(1.0), "scale"), (priors.half_cauchy(2.0), "scale")],
)
def test_mlp_sites_with_hyperprior(hyper, site):
    tr = _trace(models.mlp((5, 5), num_classes=2, prior=priors.normal(hyper)), X, Y)
    shapes = _shapes(tr)
    for i in range(3):
        assert shapes[f"dense_{i}.{site}"] == ()
    assert len(shapes) == 8 + 3


def test_mlp_scale_scopes():
    net = _shapes(_trace(models.mlp((5, 5), num_classes=2, prior=priors.laplace(priors.half_cauchy(1.0), per="network")), X, Y))
    assert net["network.scale"] == () and not any(k.startswith("dense_0.scale") for k in net)
    unit = _shapes(_trace(models.mlp((5, 5), num_classes=2, prior=priors.normal(priors.inverse_gamma(), per="unit")), X, Y))
    assert unit["dense_0.variance"] == (5,) and unit["dense_2.variance"] == (2,)


def test_regression_learned_and_fixed_noise():
    xr, yr = np.zeros((4, 1), np.float32), np.zeros(4, np.float32)
    learned = _shapes(_trace(models.mlp((3,), likelihood="gaussian"), xr, yr))
    assert learned["noise"] == () and learned["mean"] == (4,)
    fixed = _shapes(_trace(models.mlp((3,), likelihood="gaussian", noise=0.5), xr, yr))
    assert "noise" not in fixed
    assert _shapes(_trace(models.mlp((), likelihood="bernoulli"), X, Y))["logits"] == (7,)


def test_subsample_scales_likelihood():
    tr = _trace(models.mlp((5,), num_classes=2), X, Y, subsample_size=3)
    assert tr["y"]["value"].shape == (3,)
    # the plate multiplies the minibatch log-likelihood by N / batch = 7 / 3
    assert tr["y"]["scale"] == pytest.approx(7 / 3)
    assert tr["dense_0.w"]["value"].shape == (2, 5)  # weights are outside the data plate


def test_dense_network_scope_needs_shared_scale():
    p = priors.normal(priors.half_normal(1.0), per="network")
    with pytest.raises(ValueError, match="sample_scale"):
        _trace(lambda x, y=None: models.dense("l", x, 3, p), X)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_classes=None), "num_classes"),
        (dict(num_classes=2, activation="swish2"), "activation"),
        (dict(likelihood="laplace"), "likelihood"),  # poisson is one now (issue 19)
        (dict(likelihood="gaussian", noise=-1.0), "noise"),
        (dict(num_classes=2, noise=1.0), "gaussian"),
        (dict(num_classes=2, hidden=(5, 0)), "≥ 1"),
    ],
)
def test_mlp_bad_arguments(kwargs, match):
    kwargs = {"hidden": (5, 5), **kwargs}
    hidden = kwargs.pop("hidden")
    with pytest.raises(ValueError, match=match):
        models.mlp(hidden, **kwargs)


def test_spec_round_trip():
    m = models.mlp((4, 3), activation="relu", num_classes=3, prior=priors.cauchy(priors.half_cauchy(0.5), per="unit"))
    assert models.from_spec(m.spec()).spec() == m.spec()


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_mlp_outputs_match_a_rows_major_numpy_forward(activation):
    # the model holds its activations features x rows (mlp.MLP.__call__); the numbers must be
    # those of the textbook h = act(x @ w + b) chain, up to float32 reassociation
    rng = np.random.default_rng(3)
    x = rng.normal(size=(9, 3)).astype(np.float32)
    tr = _trace(models.mlp((4, 6), activation=activation, num_classes=3), x, np.zeros(9, np.int32))
    act = np.tanh if activation == "tanh" else (lambda a: np.maximum(a, 0.0))
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ np.asarray(tr[f"dense_{i}.w"]["value"], np.float64) + np.asarray(tr[f"dense_{i}.b"]["value"], np.float64)
        if i < 2:
            h = act(h)
    np.testing.assert_allclose(np.asarray(tr["logits"]["value"]), h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("logits_shape", "value_shape"), [((6, 3), (6,)), ((6, 3), (4, 6)), ((3,), (5,)), ((2, 6, 4), (6,))]
)
def test_categorical_log_prob_is_the_log_softmax_of_the_label(logits_shape, value_shape):
    # mlp's CategoricalLogits moves the class axis first for speed; its log-probabilities must
    # be NumPy's log-softmax at the label, broadcast like NumPyro's Categorical
    from bnnpp.models.mlp import CategoricalLogits

    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=logits_shape).astype(np.float32)
    classes = logits_shape[-1]
    value = rng.integers(0, classes, size=value_shape)
    got = np.asarray(CategoricalLogits(logits).log_prob(value))
    lz = logits.astype(np.float64)
    log_softmax = lz - np.log(np.exp(lz - lz.max(-1, keepdims=True)).sum(-1, keepdims=True)) - lz.max(-1, keepdims=True)
    shape = np.broadcast_shapes(value_shape, logits_shape[:-1])
    want = np.take_along_axis(np.broadcast_to(log_softmax, (*shape, classes)), np.broadcast_to(value, shape)[..., None], -1)[..., 0]
    assert got.shape == shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_categorical_log_prob_of_a_label_out_of_range_is_minus_inf():
    from bnnpp.models.mlp import CategoricalLogits

    lp = np.asarray(CategoricalLogits(np.zeros((3, 2), np.float32)).log_prob(np.array([0, 2, -1])))
    assert np.isfinite(lp[0]) and (lp[1:] == -np.inf).all()  # as numpyro's Categorical
