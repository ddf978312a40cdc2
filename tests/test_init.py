"""bnnpp.fit(..., init=...): every optimisation-based method starts from given weights, and
laplace with num_steps=0 is the Laplace approximation at given weights (post hoc)."""

from __future__ import annotations

import warnings

import numpy as np
import optax
import pytest

import bnnpp
from bnnpp import priors

X = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
Y = (X[:, 0] * X[:, 1] > 0).astype(np.int32)


def _model():
    return bnnpp.models.mlp((4,), num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))


@pytest.fixture(scope="module")
def fitted():
    """A short MAP fit and its point: {site: constrained value}."""
    post = bnnpp.fit(_model(), (X, Y), method="map", num_steps=300, progress=False, seed=1)
    return post, {k: np.asarray(v[0, 0]) for k, v in post.samples.items()}


def _quiet_fit(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bnnpp.fit(*args, progress=False, **kwargs)


def test_map_starts_exactly_at_the_given_values(fitted):
    _, point = fitted
    # zero updates: the one step leaves the start as it is, so the draw is the start
    post = _quiet_fit(_model(), (X, Y), method="map", num_steps=1, optimizer=optax.set_to_zero(), init=point)
    for k, v in point.items():
        np.testing.assert_allclose(post.samples[k][0, 0], v, rtol=1e-5, atol=1e-6)
    assert post.info["options"]["init"].startswith("sha256:")


def test_a_partial_start_leaves_the_other_sites_to_the_method(fitted):
    _, point = fitted
    given = {"dense_0.w": point["dense_0.w"]}
    post = _quiet_fit(_model(), (X, Y), method="map", num_steps=1, optimizer=optax.set_to_zero(), init=given)
    np.testing.assert_allclose(post.samples["dense_0.w"][0, 0], point["dense_0.w"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(post.samples["dense_1.w"][0, 0], point["dense_1.w"])


def test_advi_and_bbb_means_start_at_the_given_values(fitted):
    _, point = fitted
    for method, opts in (("advi", {"num_steps": 1}), ("bbb", {"num_steps": 1})):
        post = _quiet_fit(_model(), (X, Y), method=method, optimizer=optax.set_to_zero(), init=point, **opts)
        loc = post.approximation.loc
        np.testing.assert_allclose(loc["dense_0.w"], point["dense_0.w"], rtol=1e-5, atol=1e-6, err_msg=method)


def test_ensemble_member_zero_starts_at_the_given_values_the_others_at_random(fitted):
    _, point = fitted
    post = _quiet_fit(_model(), (X, Y), method="ensemble", members=2, num_steps=1, optimizer=optax.set_to_zero(), init=point)
    w = post.samples["dense_0.w"]  # (members, draws, ...)
    np.testing.assert_allclose(w[0, 0], point["dense_0.w"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(w[1, 0], point["dense_0.w"])


def test_posthoc_laplace_equals_the_laplace_of_a_fit_at_the_same_weights():
    """laplace num_steps=0 at a MAP's weights is the laplace fit whose MAP found them."""
    full = _quiet_fit(_model(), (X, Y), method="laplace", num_steps=300, seed=1, num_samples=20)
    # the MAP of the laplace fit is the map fit with the same seed, steps and hyperparameters (both default to
    # "auto", which trains this hierarchical prior's scales by evidence)
    map_post = _quiet_fit(_model(), (X, Y), method="map", num_steps=300, seed=1)
    post = _quiet_fit(_model(), (X, Y), method="laplace", num_steps=0, init=map_post, seed=1, num_samples=20)
    a, b = full.predict(X).mean, post.predict(X).mean
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert post.stats.extras["log_marginal_likelihood"] == pytest.approx(full.stats.extras["log_marginal_likelihood"], rel=1e-4)


def test_flax_module_parameters_are_a_start():
    nnx = pytest.importorskip("flax.nnx")

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(2, 3, rngs=rngs)
            self.l2 = nnx.Linear(3, 2, rngs=rngs)

        def __call__(self, x):
            return self.l2(nnx.tanh(self.l1(x)))

    module = Net(nnx.Rngs(3))
    model = bnnpp.models.from_flax(module, num_classes=2)
    post = _quiet_fit(model, (X, Y), method="map", num_steps=1, optimizer=optax.set_to_zero(), init=module)
    np.testing.assert_allclose(post.samples["l1.kernel"][0, 0], np.asarray(module.l1.kernel.value), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(post.samples["l2.bias"][0, 0], np.asarray(module.l2.bias.value), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "bad, error, words",
    [
        ({"nope": 1.0}, ValueError, "not latent site"),
        ({"dense_0.w": np.zeros((3, 3))}, ValueError, "has shape (3, 3)"),
        ({"dense_0.w": np.full((2, 4), np.nan)}, ValueError, "non-finite"),
        ({"dense_0.scale": -np.ones(())}, ValueError, "outside the site's support"),
        ({}, ValueError, "init is empty"),
        (5, TypeError, "init must be a dict"),
        ({"dense_0.w": "abc"}, TypeError, "numeric array"),
    ],
)
def test_bad_start_values_are_one_line_errors_before_anything_compiles(bad, error, words, compile_counter):
    model = _model()
    sites = bnnpp.introspection.latent_sites(model, X, Y)
    if "dense_0.scale" in str(bad) and "dense_0.scale" not in sites:
        name = next(k for k in sites if "scale" in k or "variance" in k)
        bad = {name: -np.ones(sites[name].shape)}
    before = compile_counter()
    with pytest.raises(error) as e:
        bnnpp.fit(model, (X, Y), method="map", num_steps=5, progress=False, init=bad)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert compile_counter() == before


def test_nuts_starts_every_chain_at_the_given_values_and_posthoc_laplace_needs_every_site(fitted):
    import jax

    from bnnpp.inference import get_method
    from bnnpp.inference.start import start_position

    _, point = fitted
    u = start_position(_model(), X, Y, point)
    nuts = get_method("nuts")
    algorithm = nuts.build(_model(), X, Y, nuts.parse({"num_chains": 2, "noncentered": False}), start=u)
    state = jax.jit(algorithm.init)(jax.random.PRNGKey(0), (X, Y))
    for name, value in u.items():
        np.testing.assert_array_equal(np.asarray(state.z[name]), np.broadcast_to(value, (2, *np.shape(value))))
    # non-centred: the chains move z = (w - loc) / scale, and start where w is the given weights
    algorithm = nuts.build(_model(), X, Y, nuts.parse({"num_chains": 2, "noncentered": True}), start=u)
    state = jax.jit(algorithm.init)(jax.random.PRNGKey(0), (X, Y))
    assert "dense_0.w_decentered" in state.z
    values = algorithm.sample(jax.random.PRNGKey(1), state, 2)
    for name, value in point.items():
        np.testing.assert_allclose(np.asarray(values[name]), np.broadcast_to(value, (2, *np.shape(value))), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="missing: .*dense_1.w"):
        bnnpp.fit(_model(), (X, Y), method="laplace", progress=False, num_steps=0, init={"dense_0.w": point["dense_0.w"]})
    with pytest.raises(ValueError, match="num_steps=0"):
        bnnpp.fit(_model(), (X, Y), method="laplace", progress=False, num_steps=0)


def test_a_started_fit_saves_and_loads(fitted, tmp_path):
    _, point = fitted
    post = _quiet_fit(_model(), (X, Y), method="map", num_steps=20, init=point)
    post.save(tmp_path / "p.nc")
    back = bnnpp.load(tmp_path / "p.nc")
    np.testing.assert_array_equal(back.predict(X[:5]).mean, post.predict(X[:5]).mean)
    assert back.info["options"]["init"] == post.info["options"]["init"]


def test_cli_init_from_a_run_folder_gives_a_posthoc_laplace(tmp_path, capsys):
    import json

    from bnnpp.cli import main

    base = ["--data", "moons", "--hidden", "4", "--quiet", "--no-cache"]
    assert main(["fit", *base, "--method", "map", "--steps", "300", "--out", str(tmp_path / "map")]) == 0
    code = main(["fit", *base, "--method", "laplace", "--steps", "0", "--num-samples", "20", "--init", str(tmp_path / "map"),
                 "--out", str(tmp_path / "lap")])
    assert code == 0
    report = json.loads((tmp_path / "lap" / "metrics.json").read_text())
    assert report["test"]["accuracy"] > 0.8
    assert "init = " in (tmp_path / "lap" / "config.toml").read_text()
    capsys.readouterr()
    assert main(["fit", *base, "--method", "map", "--init", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) != 0
    assert "--init:" in capsys.readouterr().err
