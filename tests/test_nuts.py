"""The ``nuts`` backend: option errors before compiling, per-draw sample statistics in ArviZ
and through save/load, the large-network warning, and (slow) convergence of 4 chains on moons.

Accuracy against the closed-form posterior and on moons is covered, for every backend, by
``test_backends.py``.
"""

from __future__ import annotations

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from test_backends import TAU, _data, linreg

import bnnpp
from bnnpp import priors
from bnnpp.inference import nuts
from bnnpp.introspection import latent_sites

SIGMA = 0.5
STATS = ("diverging", "acceptance_rate", "step_size", "tree_depth", "n_steps", "energy", "lp")


def linreg_with_mean(x, y=None):
    """``linreg`` plus a deterministic site, which must not end up among the samples."""
    w = numpyro.sample("w", dist.Normal(0.0, TAU).expand([x.shape[1]]).to_event(1))
    mean = numpyro.deterministic("mean", x @ w)
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(mean, SIGMA), obs=y)


@pytest.mark.parametrize(
    "options, match",
    [
        ({"num_chains": 0}, "num_chains must be an integer ≥ 1"),
        ({"num_chains": 2.0}, "num_chains must be an integer"),
        ({"num_samples": 0}, "num_samples must be an integer ≥ 1"),
        ({"num_warmup": -1}, "num_warmup must be an integer ≥ 0"),
        ({"num_warmup": 10.5}, "num_warmup must be an integer ≥ 0"),
        ({"target_accept_prob": 1.5}, "target_accept_prob must be a number strictly between 0 and 1"),
        ({"target_accept_prob": 0}, "target_accept_prob must be a number strictly between 0 and 1"),
        ({"max_tree_depth": 0}, "max_tree_depth must be an integer from 1 to 15"),
        ({"max_tree_depth": 16}, "max_tree_depth must be an integer from 1 to 15"),
        ({"chain_method": "bogus"}, "chain_method must be one of vectorized, parallel, sequential"),
        ({"init_radius": -1.0}, "init_radius must be a positive number"),
        ({"dense_mass": "yes"}, "dense_mass must be True or False"),
        ({"step_size": 0.1}, "method 'nuts' does not take option.* step_size"),
    ],
)
def test_bad_options_raise_before_compiling(options, match, compile_counter):
    x, y = _data(20)
    before = compile_counter()
    with pytest.raises(ValueError, match=match):
        bnnpp.fit(linreg, (x, y), method="nuts", progress=False, **options)
    assert compile_counter() == before


def test_parallel_needs_a_device_per_chain(compile_counter):
    x, y = _data(20)
    n = jax.local_device_count() + 1
    before = compile_counter()
    match = r'use chain_method="vectorized".*XLA_FLAGS=--xla_force_host_platform_device_count'
    with pytest.raises(ValueError, match=match):
        bnnpp.fit(linreg, (x, y), method="nuts", progress=False, num_chains=n, chain_method="parallel")
    assert compile_counter() == before


def test_sample_stats_and_round_trip(tmp_path, recwarn):
    x, y = _data()
    post = bnnpp.fit(
        linreg_with_mean, (x, y), method="nuts", seed=0, progress=False, num_chains=2, num_warmup=100, num_samples=100
    )
    assert not [w for w in recwarn if "will be slow" in str(w.message)]  # 3 parameters: no size warning
    assert set(post.samples) == {"w"}  # latent sites only: the deterministic "mean" is left out
    assert post.samples["w"].shape == (2, 100, 3)

    info = post.info
    assert info["method"] == "nuts" and info["num_parameters"] == 3
    assert info["device"] == "cpu"  # 3 parameters: the CPU under device="auto", on a GPU machine too
    assert info["options"]["num_chains"] == 2 and info["options"]["target_accept_prob"] == 0.8
    for key in ("compile_seconds", "run_seconds", "sample_seconds"):
        assert info[key] >= 0.0
    assert info["compile_seconds"] > 0.0  # NUTS compiles at least one XLA program

    stats = post.to_arviz().sample_stats
    for name in STATS:
        assert stats[name].dims == ("chain", "draw"), name
        assert stats[name].shape == (2, 100), name
    assert stats["diverging"].dtype == bool
    assert int(stats["diverging"].sum()) == info["divergences"] == sum(info["divergences_per_chain"])
    assert len(info["divergences_per_chain"]) == 2
    acc = stats["acceptance_rate"].values
    assert np.all((acc >= 0) & (acc <= 1)) and 0.5 < acc.mean() <= 1
    step = stats["step_size"].values
    assert np.all(step > 0) and np.all(step == step[:, :1])  # adapted in warmup, then fixed per chain
    depth, n_steps = stats["tree_depth"].values, stats["n_steps"].values
    assert np.all((depth >= 1) & (depth <= 10))
    assert np.all((2 ** (depth - 1) <= n_steps) & (n_steps <= 2**depth - 1))  # a depth-d tree: < 2**d steps
    assert np.all(stats["energy"].values >= -stats["lp"].values - 1e-3)  # H = U + kinetic, kinetic ≥ 0

    path = tmp_path / "p.nc"
    post.save(path)
    back = bnnpp.load(path, model=linreg_with_mean)
    np.testing.assert_array_equal(back.samples["w"], post.samples["w"])
    for name in STATS:
        np.testing.assert_array_equal(back.info["sample_stats"][name], info["sample_stats"][name])
    assert back.info["divergences"] == info["divergences"]
    stats_back = back.to_arviz().sample_stats
    assert set(STATS) <= set(stats_back.data_vars)
    np.testing.assert_array_equal(stats_back["tree_depth"].values, stats["tree_depth"].values)


def test_device_auto_keeps_small_nuts_on_the_cpu(monkeypatch):
    cpu = jax.devices("cpu")[0]
    if jax.default_backend() == "cpu":  # nothing to choose on a CPU-only machine
        assert nuts.device_for("auto", 57, 700, placed=False) is None
    monkeypatch.setattr(nuts.jax, "default_backend", lambda: "gpu")
    assert nuts.device_for("auto", 57, 700, placed=False) == cpu  # moons 2-5-5-2: 6 draws/s on an H100, 23 on a CPU
    assert nuts.device_for("auto", 10_602, 60_000, placed=False) is None
    assert nuts.device_for("default", 57, 700, placed=False) is None
    assert nuts.device_for("cpu", 10**6, 10**6, placed=False) == cpu
    assert nuts.device_for("auto", 57, 700, placed=True) is None  # a mesh decides
    with pytest.raises(ValueError, match='device="cpu" runs NUTS on one CPU device'):
        nuts.device_for("cpu", 57, 700, placed=True)


def test_tree_depth_from_steps():
    steps = np.array([[1, 2, 3, 4, 7, 8, 1023]])
    np.testing.assert_array_equal(nuts.tree_depth(steps), [[1, 2, 2, 3, 3, 4, 10]])


def test_parameter_count_and_size_warning(monkeypatch, compile_counter):
    model = bnnpp.models.mlp((100, 100), num_classes=2, prior=priors.normal(1.0))
    x = np.zeros((8, 2), np.float32)
    y = np.zeros(8, np.int32)
    expected = (2 * 100 + 100) + (100 * 100 + 100) + (100 * 2 + 2)
    assert nuts.num_parameters(latent_sites(model, x, y)) == expected > nuts.PARAMETER_WARNING
    assert nuts.num_parameters(latent_sites(linreg, *_data(10))) == 3

    class Stop(Exception):
        pass

    def no_sampler(*args, **kwargs):  # the warning comes before the sampler is built
        raise Stop

    monkeypatch.setattr(nuts, "hmc", no_sampler)
    before = compile_counter()
    with pytest.warns(UserWarning, match=r"10,602 parameters.*'advi', 'bbb' or 'sgld'"), pytest.raises(Stop):
        bnnpp.fit(model, (x, y), method="nuts", progress=False)
    assert compile_counter() == before


@pytest.mark.slow
def test_moons_four_chains_converge(moons):
    """Rank-normalised R-hat ≤ 1.05 for every layer's prior variance across 4 chains."""
    import arviz as az

    model = bnnpp.models.mlp((5, 5), num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    post = bnnpp.fit(model, moons, method="nuts", seed=0, progress=False, num_chains=4, num_warmup=500, num_samples=500)
    assert "logits" not in post.samples
    names = [f"dense_{i}.variance" for i in range(3)]
    assert set(names) <= set(post.samples)
    idata = post.to_arviz()
    assert idata.sample_stats["diverging"].shape == (4, 500)
    rhat = az.rhat(idata, var_names=names)
    for name in names:
        assert float(rhat[name]) <= 1.05, (name, float(rhat[name]))


def test_only_weights_with_a_learned_scale_are_decentred():
    from bnnpp.inference.nuts import learned_location_scale

    x, y = np.zeros((3, 2), np.float32), np.zeros(3, np.int32)
    hierarchical = bnnpp.models.mlp((4,), num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    assert learned_location_scale(hierarchical, x, y) == {"dense_0.w", "dense_0.b", "dense_1.w", "dense_1.b"}
    fixed = bnnpp.models.mlp((4,), num_classes=2)  # N(0, 1) weights: nothing to decentre
    assert learned_location_scale(fixed, x, y) == frozenset()


@pytest.mark.parametrize("noncentered", [True, False])
def test_noncentered_keeps_the_weight_sites(noncentered):
    """Decentring changes what NUTS moves through, not what the Posterior holds."""
    model = bnnpp.models.mlp((2,), num_classes=2, prior=priors.laplace(priors.half_normal(1.0)))
    x = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    post = bnnpp.fit(model, (x, y), method="nuts", num_chains=1, num_warmup=30, num_samples=20,
                     noncentered=noncentered, progress=False)
    assert set(post.samples) == {"dense_0.w", "dense_0.b", "dense_0.scale", "dense_1.w", "dense_1.b", "dense_1.scale"}
    assert post.samples["dense_0.w"].shape == (1, 20, 2, 2)
    assert np.all(post.samples["dense_0.scale"] > 0)
