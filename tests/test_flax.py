"""Flax modules as Bayesian networks (:func:`bnnpp.models.from_flax`): the same architecture
as :func:`bnnpp.models.mlp` gives the same log joint and the same fits; every registered
backend fits a Flax model; stateful layers; site names with '/' save and load; errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import scipy.stats
from flax import nnx
from numpyro import handlers
from numpyro.contrib.module import random_flax_module

import bnnpp
from bnnpp import metrics, priors, pruning
from bnnpp.inference.joint import joint_terms
from bnnpp.inference.variational_layers import find_layers
from bnnpp.introspection import latent_sites
from bnnpp.models import from_flax

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from flax_bayesian import FlaxLeNet5, FlaxMLP, build_model, main  # noqa: E402
from shared_data import DATA_DIR  # noqa: E402


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(5)(x))
        x = nn.Dropout(0.5)(x)  # switched off by from_flax
        return nn.Dense(2)(x)


class LinenTanh(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(jnp.tanh(nn.Dense(3)(x)))


class LinenCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(3, (3, 3), strides=2, padding="SAME")(x))
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(2)(nn.LayerNorm()(x))


class NNXWithNorm(nnx.Module):
    def __init__(self, rngs):
        self.fc = nnx.Linear(2, 4, rngs=rngs)
        self.norm = nnx.LayerNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.out = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x):
        return self.out(self.drop(jnp.tanh(self.norm(self.fc(x)))))


MLP_NAMES = {"dense_0.w": "layers.0.kernel", "dense_0.b": "layers.0.bias", "dense_1.w": "layers.1.kernel",
             "dense_1.b": "layers.1.bias", "dense_2.w": "layers.2.kernel", "dense_2.b": "layers.2.bias",
             "dense_0.variance": "layers.0.variance", "dense_1.variance": "layers.1.variance",
             "dense_2.variance": "layers.2.variance"}  # fmt: skip


def _xy(n=12, d=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, 2, n).astype(np.int32)


@pytest.mark.parametrize(
    "prior", [priors.normal(1.0), priors.normal(priors.inverse_gamma(1.0, 1.0)), priors.laplace(priors.half_cauchy(1.0), per="unit")]
)
def test_same_log_joint_as_mlp(prior):
    """mlp((5, 5)) and the NNX MLP 2-5-5-2 with the same prior: same latent sites (renamed),
    same log prior and log likelihood at the same unconstrained position (float32 sums of a
    few dozen terms: rtol 1e-5)."""
    x, y = _xy()
    ref = bnnpp.models.mlp((5, 5), num_classes=2, prior=prior)
    model = from_flax(FlaxMLP(rngs=nnx.Rngs(0)), num_classes=2, prior=prior)
    ref_sites, sites = latent_sites(ref, x, y), latent_sites(model, x, y)
    names = {MLP_NAMES.get(k, k.replace("dense_", "layers.")): k for k in ref_sites}
    assert list(sites) == list(names)  # the same order, so seeds line up across backends
    assert all(sites[n].shape == ref_sites[r].shape for n, r in names.items())
    u = {r: jax.random.normal(jax.random.PRNGKey(i), s.shape) for i, (r, s) in enumerate(ref_sites.items())}
    lp_ref, ll_ref, _ = joint_terms(ref, u, x, y, jax.random.PRNGKey(0))
    lp, ll, _ = joint_terms(model, {n: u[r] for n, r in names.items()}, x, y, jax.random.PRNGKey(0))
    np.testing.assert_allclose([lp, ll], [lp_ref, ll_ref], rtol=1e-5)


def test_priors_by_module_path_against_scipy():
    """Hierarchical normal per layer on kernels, fixed N(0, 2) on biases, no prior on the
    LayerNorm scale: the log prior at given values equals the scipy sum."""
    model = from_flax(
        NNXWithNorm(nnx.Rngs(0)), num_classes=2, prior=priors.normal(2.0),
        priors={"*.kernel": priors.normal(priors.half_normal(1.0)), "norm.scale": None},
    )  # fmt: skip
    x, y = _xy()
    sites = latent_sites(model, x, y)
    assert set(sites) == {"fc.scale", "fc.kernel", "fc.bias", "norm.scale", "norm.bias", "out.scale", "out.kernel", "out.bias"}
    assert sites["fc.kernel"].dims == ("fc.in", "fc.out") and sites["norm.bias"].dims == ("norm.out",)
    rng = np.random.default_rng(1)
    values = {k: rng.normal(size=s.shape).astype(np.float32) for k, s in sites.items()}
    values["fc.scale"], values["out.scale"] = np.float32(0.7), np.float32(1.3)
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(x, y)
    got = sum(float(jnp.sum(tr[k]["fn"].log_prob(tr[k]["value"]))) for k in sites)
    want = scipy.stats.halfnorm.logpdf([0.7, 1.3]).sum()
    want += scipy.stats.norm(0, 0.7).logpdf(values["fc.kernel"]).sum() + scipy.stats.norm(0, 1.3).logpdf(values["out.kernel"]).sum()
    want += sum(scipy.stats.norm(0, 2.0).logpdf(values[k]).sum() for k in ("fc.bias", "out.bias", "norm.bias"))
    np.testing.assert_allclose(got, want, rtol=1e-5)  # norm.scale is flat: log-density 0


def test_scopes_per_unit_and_network():
    x, y = _xy()
    unit = latent_sites(from_flax(FlaxMLP(rngs=nnx.Rngs(0)), num_classes=2, prior=priors.normal(priors.half_cauchy(1.0), per="unit")), x, y)
    assert unit["layers.1.scale"].shape == (5,) and unit["layers.2.scale"].shape == (2,)
    net = latent_sites(from_flax(FlaxMLP(rngs=nnx.Rngs(0)), num_classes=2, prior=priors.normal(priors.half_cauchy(1.0), per="network")), x, y)
    assert [k for k in net if k.endswith(".scale")] == ["network.scale"]


def test_layer_outputs_are_flax_outputs_and_bbb_sees_the_layers():
    """The layer message's default (sampling kernel and bias, computing x @ w + b or the
    convolution) reproduces the Flax module at the same parameters, for NNX and Linen, dense
    and strided SAME convolutions; bbb finds the layers with the right fan-in."""
    x = np.random.default_rng(0).normal(size=(3, 28, 28, 1)).astype(np.float32)
    lenet = FlaxLeNet5(rngs=nnx.Rngs(1))
    model = from_flax(lenet, num_classes=10)
    values = {".".join(map(str, p)): v[...] for p, v in nnx.to_flat_state(nnx.state(lenet, nnx.Param))}
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(x)
    np.testing.assert_allclose(tr["logits"]["value"], lenet(x), atol=1e-5)
    layers = find_layers(model, x, None)
    assert {k: (v["kind"], v["fan_in"]) for k, v in layers.items()} == {
        "conv1": ("conv2d", 25), "conv2": ("conv2d", 150), "conv3": ("conv2d", 400), "fc1": ("dense", 120), "fc2": ("dense", 84)}  # fmt: skip

    xi = x[:, :8, :8]
    linen = LinenCNN()
    variables = linen.init(jax.random.PRNGKey(0), xi)
    model = from_flax(linen, num_classes=2)
    flat = {".".join(k.key for k in path): v for path, v in jax.tree_util.tree_flatten_with_path(variables["params"])[0]}
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=flat)).get_trace(xi)
    np.testing.assert_allclose(tr["logits"]["value"], linen.apply(variables, xi), atol=1e-5)
    assert {k: v["kind"] for k, v in find_layers(model, xi, None).items()} == {"Conv_0": "conv2d", "Dense_0": "dense"}


def test_dropout_is_off_and_batchnorm_is_refused():
    """Dropout: the model's logits at fixed parameters are the same under two seeds and equal
    the module in eval mode. BatchNorm (NNX or Linen): a one-line ValueError."""
    x, y = _xy()
    module = NNXWithNorm(nnx.Rngs(0))
    model = from_flax(module, num_classes=2)
    values = {".".join(map(str, p)): v[...] for p, v in nnx.to_flat_state(nnx.state(module, nnx.Param))}
    logits = [handlers.trace(handlers.substitute(handlers.seed(model, s), data=values)).get_trace(x)["logits"]["value"] for s in (0, 1)]
    np.testing.assert_array_equal(logits[0], logits[1])
    np.testing.assert_allclose(logits[0], nnx.view(module, deterministic=True)(x), atol=1e-6)

    linen = from_flax(LinenMLP(), num_classes=2)  # nn.Dropout(0.5) without `deterministic`: off, not an error
    v = {k: np.random.default_rng(2).normal(size=s.shape).astype(np.float32) for k, s in latent_sites(linen, x, y).items()}
    got = handlers.trace(handlers.substitute(handlers.seed(linen, 0), data=v)).get_trace(x)["logits"]["value"]
    want = np.tanh(x @ v["Dense_0.kernel"] + v["Dense_0.bias"]) @ v["Dense_1.kernel"] + v["Dense_1.bias"]
    np.testing.assert_allclose(got, want, atol=1e-5)

    class WithBN(nnx.Module):
        def __init__(self, rngs):
            self.fc, self.bn = nnx.Linear(2, 2, rngs=rngs), nnx.BatchNorm(2, rngs=rngs)

        def __call__(self, x):
            return self.bn(self.fc(x))

    class LinenBN(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=False)(nn.Dense(2)(x))

    with pytest.raises(ValueError, match="BatchNorm keeps running statistics"):
        from_flax(WithBN(nnx.Rngs(0)), num_classes=2)
    with pytest.raises(ValueError, match="BatchNorm keeps running statistics"):
        bnnpp.fit(from_flax(LinenBN(), num_classes=2), (x, y), method="map", progress=False, num_steps=2)


def test_errors_are_one_line():
    x, y = _xy()
    with pytest.raises(TypeError, match="from_flax") as e:
        bnnpp.fit(LinenMLP(), (x, y), method="map", progress=False)
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="from_flax"):
        bnnpp.fit(FlaxMLP(rngs=nnx.Rngs(0)), (x, y), method="map", progress=False)
    with pytest.raises(TypeError, match="from_flax"):
        bnnpp.load("no-such-file.nc", model=LinenMLP())
    assert list(latent_sites(from_flax(lambda: FlaxMLP(rngs=nnx.Rngs(0)), num_classes=2), x, y))[:2] == ["layers.0.kernel", "layers.0.bias"]
    with pytest.raises(TypeError, match="module instance"):
        from_flax(LinenMLP, num_classes=2)
    with pytest.raises(ValueError, match="match no parameter"):
        from_flax(FlaxMLP(rngs=nnx.Rngs(0)), num_classes=2, priors={"*.kernal": priors.normal(1.0)})
    with pytest.raises(TypeError, match="priors maps"):
        from_flax(FlaxMLP(rngs=nnx.Rngs(0)), num_classes=2, priors={"*.kernel": 1.0})
    with pytest.raises(ValueError, match="needs num_classes"):
        from_flax(FlaxMLP(rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match=r"returns shape \(12, 2\)"):
        bnnpp.fit(from_flax(FlaxMLP(rngs=nnx.Rngs(0)), num_classes=3), (x, y), method="map", progress=False, num_steps=2)


def _site_names_with_slash(x, y=None):
    """A user's own NumPyro model: NumPyro's random_flax_module names sites 'net/Dense_0.kernel'."""
    net = random_flax_module("net", LinenTanh(), dist.Normal(0.0, 1.0), input_shape=(1, 2))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Categorical(logits=net(x)), obs=y)


def test_slash_site_names_save_and_load(tmp_path):
    x, y = _xy(40)
    post = bnnpp.fit(_site_names_with_slash, (x, y), method="map", seed=0, progress=False, num_steps=20)
    assert "net/Dense_0.kernel" in post.samples
    post.save(tmp_path / "p.nc")
    back = bnnpp.load(tmp_path / "p.nc", model=_site_names_with_slash)
    assert set(back.samples) == set(post.samples)
    np.testing.assert_array_equal(back.samples["net/Dense_0.kernel"], post.samples["net/Dense_0.kernel"])
    # a DataTree (ArviZ 1.x) cannot hold '/' in a name: bnnpp escapes it as in a file (encode_name)
    compat = bnnpp.posterior.arviz_compat
    key = compat.encode_name("net/Dense_0.kernel") if compat.arviz_major() >= 1 else "net/Dense_0.kernel"
    dims = [compat.groups(p.to_arviz())["posterior"][key].dims[2:] for p in (back, post)]
    assert dims[0] == dims[1]
    np.testing.assert_allclose(back.predict(x[:5]).probs, post.predict(x[:5]).probs, rtol=1e-6)


MOONS_FAST = {"advi": {"num_steps": 1500}, "bbb": {"epochs": 1500}}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["advi", "bbb"])
def test_moons_same_as_mlp(method, moons):
    """The same architecture, prior, seed and options: the Flax NNX MLP and mlp((5, 5)) end at
    the same loss and test accuracy. Their sites come in the same order (checked above), so
    the initialisation and every random draw line up; the tolerance (loss rtol 1e-3,
    accuracy 0.01 = 3 of 300 test points) only absorbs float32 reassociation."""
    prior = priors.normal(priors.inverse_gamma(1.0, 1.0))
    out = {}
    for name, model in (("mlp", bnnpp.models.mlp((5, 5), num_classes=2, prior=prior)),
                        ("flax", from_flax(FlaxMLP(rngs=nnx.Rngs(3)), num_classes=2, prior=prior))):  # fmt: skip
        post = bnnpp.fit(model, moons, method=method, seed=0, progress=False, num_samples=100, **MOONS_FAST[method])
        out[name] = (float(post.info["loss"][-1]), metrics.accuracy(post.predict(moons.x_test).mean, moons.y_test))
    assert out["flax"][1] >= 0.85
    np.testing.assert_allclose(out["flax"][0], out["mlp"][0], rtol=1e-3)
    assert abs(out["flax"][1] - out["mlp"][1]) <= 0.01


# tiny settings for a 2-4-2 network (a few seconds each); the registry test in
# test_backends.py checks the methods' accuracy, this one that every one takes a Flax model
FLAX_OPTIONS = {
    "map": {"num_steps": 300},
    "advi": {"num_steps": 300, "num_samples": 50},
    "bbb": {"epochs": 300, "num_samples": 50},
    "nuts": {"num_chains": 2, "num_warmup": 100, "num_samples": 50},
    "chees": {"num_chains": 2, "num_warmup": 100, "num_samples": 50},
    "mclmc": {"num_chains": 2, "num_warmup": 100, "num_samples": 50},
    "pathfinder": {"num_paths": 2, "num_samples": 50},
    "sgld": {"num_samples": 50, "burn_in": 300},  # the defaults: psgld, step 1e-2, Glorot start
    # the hierarchical scale is a coordinate of the exact Hessian's Gaussian, under the model's own prior
    "laplace": {"num_steps": 300, "hessian": "full", "prior_precision": "model", "num_samples": 50},
    "ensemble": {"num_steps": 300, "members": 3},
    "mc_dropout": {"num_steps": 300, "num_samples": 50},
    "vd": {"epochs": 300, "num_samples": 50},
}


FAST = ("map",)  # bbb through Flax layers is also in test_layer_outputs_are_flax_outputs_and_bbb_sees_the_layers; the rest take 10–40 s each on 2 shared cores: slow (CI runs -m "not slow")


def _registry():
    for method in bnnpp.registered():
        yield pytest.param(method, id=method, marks=() if method in FAST else pytest.mark.slow)


@pytest.mark.parametrize("method", list(_registry()))
def test_every_backend_fits_a_flax_model(method, moons, tmp_path):
    """Linen (with dropout and LayerNorm's scale left without a prior) under every registered
    method: finite draws of every module-path site, ArviZ dims from module paths, save/load
    through the user's constructor, identical predictions, SNR pruning where it applies."""
    x, y = moons.x_train[:100], moons.y_train[:100]

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dropout(0.3)(jnp.tanh(nn.Dense(4)(x)))
            return nn.Dense(2)(nn.LayerNorm(use_bias=False)(h))

    def make():
        return from_flax(Net(), num_classes=2, priors={"LayerNorm_0.scale": None, "Dense_0.*": priors.normal(priors.half_normal(1.0))})

    post = bnnpp.fit(make(), (x, y), method=method, seed=0, progress=False, **FLAX_OPTIONS.get(method, {}))
    assert set(post.samples) == {"Dense_0.scale", "Dense_0.kernel", "Dense_0.bias", "LayerNorm_0.scale", "Dense_1.kernel", "Dense_1.bias"}
    assert all(np.all(np.isfinite(v)) for v in post.samples.values())
    idata = post.to_arviz()
    assert idata.posterior["Dense_0.kernel"].dims == ("chain", "draw", "Dense_0.in", "Dense_0.out")
    post.save(tmp_path / "p.nc")
    with pytest.raises(ValueError, match="from_flax"):
        bnnpp.load(tmp_path / "p.nc")
    back = bnnpp.load(tmp_path / "p.nc", model=make())
    np.testing.assert_allclose(back.predict(x[:7]).probs, post.predict(x[:7]).probs, rtol=1e-5)
    assert metrics.accuracy(post.predict(moons.x_test).mean, moons.y_test) > 0.6  # learning, not chance (0.5)
    if post.num_chains * post.num_draws > 1:
        pruned = pruning.prune(post, 0.5)
        kept = np.mean(pruned.samples["Dense_0.kernel"] != 0) + np.mean(pruned.samples["Dense_1.kernel"] != 0)
        assert 0.5 <= kept <= 1.5  # half of the 16 kernel entries zeroed in every draw


@pytest.mark.slow
def test_bbb_estimators_on_a_flax_cnn():
    """local and flipout answer the Flax Conv/Linear layers: the per-step noise of the loss
    differs from reparam's (they never form a shared weight draw) yet all three train."""
    x = np.random.default_rng(0).normal(size=(16, 8, 8, 1)).astype(np.float32)
    y = (x.mean(axis=(1, 2, 3)) > 0).astype(np.int32)

    class CNN(nnx.Module):
        def __init__(self, rngs):
            self.conv = nnx.Conv(1, 2, (3, 3), strides=2, rngs=rngs)
            self.fc = nnx.Linear(32, 2, rngs=rngs)

        def __call__(self, x):
            return self.fc(jax.nn.relu(self.conv(x)).reshape(x.shape[0], -1))

    model = from_flax(CNN(nnx.Rngs(0)), num_classes=2)
    losses = {}
    for est in ("reparam", "local", "flipout"):
        post = bnnpp.fit(model, (x, y), method="bbb", seed=0, progress=False, epochs=150, estimator=est, num_samples=10)
        losses[est] = np.asarray(post.info["loss"])
        assert np.all(np.isfinite(losses[est])) and losses[est][-20:].mean() < losses[est][:20].mean()
    assert not np.allclose(losses["local"], losses["reparam"]) and not np.allclose(losses["flipout"], losses["reparam"])


@pytest.mark.slow
def test_example_script_runs(tmp_path, capsys):
    rows = main(["--steps", "100", "--epochs", "100", "--draws", "30", "--out", str(tmp_path)])
    assert set(rows) == {"advi", "bbb", "compare"} and sorted(rows["compare"]) == ["advi", "bbb"]
    assert "test accuracy" in capsys.readouterr().out
    back = bnnpp.load(tmp_path / "bbb.nc", model=build_model("moons"))
    assert back.predict(np.zeros((3, 2), np.float32)).probs.shape == (30, 3, 2)


# ---------------------------------------------------------------------------- slow: MNIST


def _data_dir() -> Path:
    return DATA_DIR


RELOAD = """
import sys, numpy as np
sys.path.insert(0, {examples!r})
import bnnpp
from flax_bayesian import build_model
post = bnnpp.load({path!r}, model=build_model("mnist"))
x = np.load({x!r})
np.save({out!r}, post.predict(x, seed=0).probs)
"""


@pytest.mark.slow
def test_flax_lenet5_bbb_flipout_one_epoch_mnist(tmp_path):
    """A Flax NNX LeNet-5, Bayes by Backprop with Flipout, one epoch over the 50,000 training
    images: ≥ 95% test accuracy (10 000 test images, 10 draws); the saved posterior loads in
    a fresh process from the user's constructor and predicts the same probabilities."""
    if not (_data_dir() / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST IDX files not found under {_data_dir()}/mnist (set BNNPP_DATA_DIR)")
    ds = bnnpp.data.load("mnist", _data_dir())
    post = bnnpp.fit(
        build_model("mnist"), ds, method="bbb", seed=0, progress=False, epochs=1, batch_size=64,
        learning_rate=3e-3, estimator="flipout", init_scale=1e-3, num_samples=10,
    )  # fmt: skip
    pred = post.predict(ds.x_test, seed=0)
    acc = metrics.accuracy(pred.mean, ds.y_test)
    print(f"Flax LeNet-5, bbb flipout, 1 epoch: test accuracy {acc:.4f}")
    assert acc >= 0.95
    path = tmp_path / "lenet.nc"
    post.save(path, include_data=False)
    np.save(tmp_path / "x.npy", ds.x_test[:200])
    code = RELOAD.format(examples=str(ROOT / "examples"), path=str(path), x=str(tmp_path / "x.npy"), out=str(tmp_path / "probs.npy"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)
    np.testing.assert_allclose(np.load(tmp_path / "probs.npy"), pred.probs[:, :200], atol=1e-5)


@pytest.mark.slow
def test_compare_and_sweep_take_a_flax_model(moons):
    """compare_methods fits a Flax model with two methods; the vmapped sweep over priors of a
    Flax model gives the same scores as fitting each configuration alone."""
    from bnnpp import compare, sweep  # noqa: PLC0415

    results, _ = compare.compare_methods(from_flax(FlaxMLP(rngs=nnx.Rngs(0)), num_classes=2), moons, ["map", "advi"], quick=True, progress=False)
    assert set(results["methods"]) == {"map", "advi"} and results["methods"]["advi"]["accuracy"] > 0.6
    configs = sweep.grid(("normal",), ("fixed", "half-normal"), fixed_scales=(1.0,))
    make = lambda p: from_flax(FlaxMLP((2, 4, 2), rngs=nnx.Rngs(0)), num_classes=2, prior=p)  # noqa: E731
    together = sweep.sweep([moons], configs, method="map", seeds=(0,), progress=False, model_fn=make, num_steps=200)
    alone = sweep.sweep([moons], configs, method="map", seeds=(0,), progress=False, vmap=False, model_fn=make, num_steps=200)
    np.testing.assert_allclose([r["accuracy"] for r in together["runs"]], [r["accuracy"] for r in alone["runs"]], atol=1 / 300)


def test_layers_bnnpp_cannot_answer_stay_ordinary_sites():
    """A Linear called twice (shared weights) and one without bias are not sent as layer
    messages (bbb samples them by reparameterisation, as in the Linen backend test's
    LayerNorm); the model still computes the module."""

    class Shared(nnx.Module):
        def __init__(self, rngs):
            self.inner = nnx.Linear(2, 2, rngs=rngs)
            self.head = nnx.Linear(2, 2, use_bias=False, rngs=rngs)
            self.out = nnx.Linear(2, 2, rngs=rngs)

        def __call__(self, x):
            return self.out(self.head(jnp.tanh(self.inner(jnp.tanh(self.inner(x))))))

    x, y = _xy()
    module = Shared(nnx.Rngs(0))
    model = from_flax(module, num_classes=2)
    assert list(find_layers(model, x, y)) == ["out"]
    values = {".".join(map(str, p)): v[...] for p, v in nnx.to_flat_state(nnx.state(module, nnx.Param))}
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(x)
    np.testing.assert_allclose(tr["logits"]["value"], module(x), atol=1e-6)
    assert set(latent_sites(model, x, y)) == {"inner.kernel", "inner.bias", "head.kernel", "out.kernel", "out.bias"}


@pytest.mark.parametrize("method, options", [("advi", {"num_steps": 20, "map_steps": 20}), ("bbb", {"epochs": 20, "map_steps": 20})])
def test_vi_defaults_under_a_hierarchical_prior_fit_a_flax_module(method, options):
    """advi's and bbb's ``hyperparameters="auto"`` takes the evidence-trained MAP under a
    hierarchical Normal prior only where the evidence runs: a Flax module's layers have no
    ``.w``/``.b`` sites, so it resolves to the variational hyperparameters instead of raising
    (found by the slow fresh-load test)."""
    x, y = _xy()
    model = from_flax(LinenTanh(), num_classes=2, prior=priors.normal(priors.half_normal(1.0)))
    post = bnnpp.fit(model, (x, y), method=method, num_samples=5, progress=False, **options)
    assert np.all(np.isfinite(post.predict(x).probs))
