"""Convolutional layers and networks: sites, shapes, the convolution itself against a numpy
reference, and Bayes by Backprop's conv estimators and KL."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers

import bnnpp
from bnnpp import models, priors
from bnnpp.inference import bbb
from bnnpp.introspection import latent_sites

IMAGES = np.random.default_rng(0).normal(size=(4, 28, 28, 1)).astype(np.float32)


def _shapes(model, x):
    """Shapes of every site of ``model(x)``, traced abstractly (eager tracing of a CNN compiles op by op)."""

    def run(key):
        tr = handlers.trace(handlers.seed(model, key)).get_trace(x)
        return {k: v["value"] for k, v in tr.items() if v["type"] in ("sample", "deterministic")}

    return {k: v.shape for k, v in jax.eval_shape(run, jax.random.PRNGKey(0)).items()}


def np_conv(x, w, stride=1, padding="VALID"):
    """Direct (loop) NHWC/HWIO cross-correlation, TensorFlow/XLA's SAME padding convention."""
    n, hh, ww, _ = x.shape
    kh, kw, _, out = w.shape
    if padding == "SAME":
        oh, ow = -(-hh // stride), -(-ww // stride)
        ph, pw = max((oh - 1) * stride + kh - hh, 0), max((ow - 1) * stride + kw - ww, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (hh - kh) // stride + 1, (ww - kw) // stride + 1
    y = np.zeros((n, oh, ow, out))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
            y[:, i, j, :] = np.einsum("nabc,abco->no", patch, w)
    return y


@pytest.mark.parametrize("builder", [models.cnn, models.lenet5])
def test_networks_give_logits_per_image(builder):
    shapes = _shapes(builder(), IMAGES)
    assert shapes["logits"] == (4, 10) and shapes["y"] == (4,)
    assert builder().input_rank == 4 and builder().task == "classification" and builder().likelihood == "categorical"
    assert _shapes(builder(num_classes=3), IMAGES)["logits"] == (4, 3)


def test_cnn_sites_shapes_and_dims():
    sites = latent_sites(models.cnn(), IMAGES, np.zeros(4, np.int32))
    assert {k: v.shape for k, v in sites.items()} == {
        "conv_0.w": (5, 5, 1, 32), "conv_0.b": (32,),
        "conv_1.w": (5, 5, 32, 32), "conv_1.b": (32,),
        "dense_0.w": (4 * 4 * 32, 64), "dense_0.b": (64,),  # 28 → 24 → 12 → 8 → 4
        "dense_1.w": (64, 10), "dense_1.b": (10,),
    }  # fmt: skip
    assert sites["conv_1.w"].dims == ("conv_1.kh", "conv_1.kw", "conv_1.in", "conv_1.out")
    assert sites["conv_1.b"].dims == ("conv_1.out",)
    lenet = latent_sites(models.lenet5(), IMAGES, np.zeros(4, np.int32))
    assert lenet["conv_0.w"].shape == (5, 5, 1, 6) and lenet["conv_2.w"].shape == (5, 5, 16, 120)
    assert lenet["dense_0.w"].shape == (120, 84)  # 28 → SAME 28 → 14 → 10 → 5 → 1
    assert sum(math.prod(s.shape) for s in lenet.values()) == 61_706  # LeNet-5's weight count


@pytest.mark.parametrize(
    "prior, expected",
    [
        (priors.normal(priors.half_normal(1.0)), {f"{l}.scale": () for l in ("conv_0", "conv_1", "dense_0", "dense_1")}),
        (priors.laplace(priors.inverse_gamma(2.0, 1.0), per="unit"), {"conv_0.variance": (32,), "conv_1.variance": (32,),
                                                                      "dense_0.variance": (64,), "dense_1.variance": (10,)}),
        (priors.scale_mixture(scale=priors.half_cauchy(1.0), per="network"), {"network.scale": ()}),
    ],
)  # fmt: skip
def test_hierarchical_priors_give_scale_sites(prior, expected):
    sites = latent_sites(models.cnn(prior=prior), IMAGES, np.zeros(4, np.int32))
    scales = {k: v.shape for k, v in sites.items() if not k.endswith((".w", ".b"))}
    assert scales == expected


@pytest.mark.parametrize("builder", [models.cnn, models.lenet5])
def test_spec_round_trip(builder):
    model = builder(prior=priors.normal(priors.inverse_gamma(1.0, 2.0), per="unit"), num_classes=7, activation="elu")
    again = models.from_spec(model.spec())
    assert type(again) is type(model) and again.spec() == model.spec()
    assert models.from_spec(builder().spec()).activation == builder().activation


@pytest.mark.parametrize("stride, padding", [(1, "VALID"), (1, "SAME"), (2, "SAME"), (2, "VALID")])
def test_conv2d_with_given_weights_matches_a_direct_convolution(stride, padding):
    """conv2d's default behaviour at fixed weights (substituted, as any backend does) is the
    cross-correlation of the numpy loop above plus the bias."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7, 6, 3)).astype(np.float32)
    w = rng.normal(size=(3, 2, 3, 4)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)

    def layer(x):
        return models.conv2d("c", x, 4, (3, 2), priors.normal(1.0), stride=stride, padding=padding)

    h = handlers.substitute(handlers.seed(layer, 0), data={"c.w": w, "c.b": b})(x)
    np.testing.assert_allclose(np.asarray(h), np_conv(x, w, stride, padding) + b, rtol=1e-4, atol=1e-4)
    tr = handlers.trace(handlers.seed(layer, 0)).get_trace(x)
    assert tr["c.w"]["infer"]["dims"] == ("c.kh", "c.kw", "c.in", "c.out")


def test_max_pool_takes_the_patch_maximum():
    x = np.random.default_rng(2).normal(size=(2, 6, 5, 3)).astype(np.float32)
    ref = x[:, :6, :4].reshape(2, 3, 2, 2, 2, 3).max(axis=(2, 4))  # a trailing partial patch is dropped
    np.testing.assert_array_equal(np.asarray(models.max_pool(x, 2)), ref)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: models.conv2d("c", np.zeros((2, 5, 5)), 3, 3, priors.normal()), "images of shape"),
        (lambda: models.conv2d("c", np.zeros((2, 5, 5, 1)), 3, 7, priors.normal()), "does not fit"),
        (lambda: models.conv2d("c", np.zeros((2, 5, 5, 1)), 3, 3, priors.normal(), padding="full"), "padding must be"),
        (lambda: models.conv2d("c", np.zeros((2, 5, 5, 1)), 0, 3, priors.normal()), "filters must be"),
        (lambda: models.conv2d("c", np.zeros((2, 5, 5, 1)), 2, (3, 0), priors.normal()), "kernel_size must be"),
        (lambda: models.max_pool(np.zeros((2, 5, 5)), 2), "images of shape"),
        (lambda: models.cnn(num_classes=1), "num_classes must be"),
        (lambda: models.lenet5(activation="swish"), "unknown activation"),
    ],
)
def test_bad_layer_and_model_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_fit_rejects_flat_images_before_compiling(compile_counter):
    before = compile_counter()
    with pytest.raises(ValueError, match="rank 4"):
        bnnpp.fit(models.cnn(), (np.zeros((8, 784), np.float32), np.zeros(8, np.int32)), method="bbb", progress=False)
    assert compile_counter() == before


# --------------------------------------------------------------------------------------
# Bayes by Backprop on conv layers
# --------------------------------------------------------------------------------------


def test_conv_estimators_give_the_same_preactivation_distribution():
    """reparam, local and flipout: every output position has mean conv(x, μ_w) + μ_b and variance
    conv(x², σ_w²) + σ_b² (the numpy loop convolution). 20,000 draws: means within 5 standard
    errors, variances within 5·sqrt(2/K) relative (the sd of a Gaussian sample variance)."""
    stride, padding = 2, "SAME"  # strided and zero-padded: border positions see part of the kernel
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 5, 2)).astype(np.float32)
    mu_w, sw = rng.normal(size=(3, 3, 2, 2)).astype(np.float32), rng.uniform(0.1, 0.6, (3, 3, 2, 2)).astype(np.float32)
    mu_b, sb = np.array([0.5, -1.0], np.float32), np.array([0.2, 0.3], np.float32)
    mean = np_conv(x, mu_w, stride, padding) + mu_b
    var = np_conv(x**2, sw**2, stride, padding) + sb**2
    k = 20_000
    keys = jax.random.split(jax.random.PRNGKey(3), k)
    for est in bbb.ESTIMATORS:
        f = lambda kk, est=est: bbb.conv_preactivations(kk, x, mu_w, sw, mu_b, sb, est, (stride, stride), padding)[0]
        h = np.asarray(jax.jit(jax.vmap(f))(keys))
        assert h.shape == (k, *mean.shape)
        assert np.all(np.abs(h.mean(0) - mean) < 5 * np.sqrt(var / k)), est
        assert np.all(np.abs(h.var(0) / var - 1) < 5 * np.sqrt(2 / k)), est


def _tiny_convnet(prior):
    def model(x, y=None):
        h = jnp.tanh(models.conv2d("c", x, 2, 3, prior))
        h = models.dense("d", h.reshape(x.shape[0], -1), 2, prior)
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Categorical(logits=h), obs=y)

    return model


def test_conv_layers_are_found_with_glorot_fans():
    layers = bbb.find_layers(models.lenet5(), IMAGES, None)
    assert list(layers) == ["conv_0", "conv_1", "conv_2", "dense_0", "dense_1"]
    assert (layers["conv_1"]["fan_in"], layers["conv_1"]["fan_out"]) == (25 * 6, 25 * 16)
    assert (layers["dense_0"]["fan_in"], layers["dense_0"]["fan_out"]) == (120, 84)


def test_conv_analytic_and_monte_carlo_kl_agree():
    """E[MC KL] = analytic KL = Σ KL(N(μ, 0.3²) ‖ N(0, 0.7²)) for a Gaussian prior on a conv layer
    (and a dense one), under the default local estimator (whose MC KL uses its own weight draw):
    2000 draws, 4 standard errors; the analytic one has no Monte-Carlo noise at all."""
    model = _tiny_convnet(priors.normal(0.7))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4, 4, 1)).astype(np.float32)
    y = np.array([0, 1, 1], np.int32)
    sites = latent_sites(model, x, y)
    assert sites["c.w"].shape == (3, 3, 1, 2) and sites["d.w"].shape == (8, 2)
    params = {
        "loc": {k: jnp.asarray(rng.normal(0, 0.5, s.shape), jnp.float32) for k, s in sites.items()},
        "rho": {k: jnp.full(s.shape, math.log(math.expm1(0.3)), jnp.float32) for k, s in sites.items()},
    }
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)

    def terms(kl):
        f = lambda k: bbb.negative_elbo_terms(model, params, k, x, y, generic=(), estimator="local", kl=kl)
        return np.asarray(jax.jit(jax.vmap(f))(keys)[1])

    kl_a, kl_m = terms("analytic"), terms("mc")
    closed = sum(
        float(jnp.sum(bbb.gaussian_kl(params["loc"][k], 0.3, 0.0, 0.7))) for k in sites
    )  # every factor has σ = 0.3
    np.testing.assert_allclose(kl_a, closed, rtol=1e-4)
    assert abs(kl_m.mean() - closed) < 4 * kl_m.std() / np.sqrt(len(kl_m))
