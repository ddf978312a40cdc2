"""The backend contract: every registered method keeps the same promises (fit, ArviZ, save/load,
a signal-stopped fit resumed bit for bit, the vmapped sweep), and a new method is one ``build``
over the public contract.

``RandomWalkMetropolis`` below is written here, in under 60 lines, on the public API only
(``Algorithm``, ``Options``/``option``, ``Method``/``register``, ``bnnpp.inference.joint``); once
registered it works through ``bnnpp.fit``, ``predict``, ``to_arviz``, save/load, ``compare``
and the vmapped ``sweep`` without any other file knowing about it.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from interrupting import interrupt_after

import bnnpp
from bnnpp import compare, sweep
from bnnpp.inference import Algorithm, Method, Options, RunSpec, TrainingInterrupted, option, register
from bnnpp.inference.joint import constrained_values, joint_terms
from bnnpp.inference.options import positive_float, positive_int
from bnnpp.inference.registry import get_method, unregister
from bnnpp.introspection import latent_sites
from bnnpp.posterior.arviz_compat import group_names


# ------------------------------------------------------------ the toy method (< 60 lines)
@dataclasses.dataclass(frozen=True)
class RWMOptions(Options):
    num_steps: int = option(600, "Metropolis steps", check=positive_int, flag="steps")
    step_size: float = option(0.05, "proposal sd on the unconstrained space", check=positive_float)
    num_samples: int = option(100, "draws kept from the second half", check=positive_int)


class RWMState(NamedTuple):
    position: dict  # site -> unconstrained value
    log_density: jax.Array  # log joint at position


class RWMInfo(NamedTuple):
    loss: jax.Array  # minus the log joint before the step
    accepted: jax.Array


def build_rwm(model, x, y, options: RWMOptions) -> Algorithm:
    sites = latent_sites(model, x, y)
    key_model = jax.random.PRNGKey(0)

    def log_density(u, data):
        log_prior, log_lik, _ = joint_terms(model, u, *data, key_model)
        return log_prior + log_lik

    def init(key, data):
        u = {n: 0.1 * jax.random.normal(k, s.shape) for (n, s), k in zip(sites.items(), jax.random.split(key, len(sites)))}
        return RWMState(u, log_density(u, data))

    def step(key, state, batch):
        k_move, k_accept = jax.random.split(key)
        moves = jax.random.split(k_move, len(sites))
        proposal = {n: v + options.step_size * jax.random.normal(k, v.shape) for (n, v), k in zip(state.position.items(), moves)}
        lp = log_density(proposal, batch)
        accept = jnp.log(jax.random.uniform(k_accept)) < lp - state.log_density
        position = jax.tree_util.tree_map(lambda a, b: jnp.where(accept, a, b), proposal, state.position)
        return RWMState(position, jnp.where(accept, lp, state.log_density)), RWMInfo(-state.log_density, accept)

    def values(state):
        return constrained_values(model, state.position, x[:1], y[:1], key_model, sites)

    def emit(key, state):
        return jax.tree_util.tree_map(lambda v: v[None], values(state)), {"lp": state.log_density[None]}

    kept = np.linspace(options.num_steps // 2, options.num_steps - 1, options.num_samples).astype(int)
    return Algorithm(init, step, lambda k, s, n: jax.tree_util.tree_map(lambda v: v[None], values(s)),
                     RunSpec(num_steps=options.num_steps, emit=emit, emit_steps=np.unique(kept), name="rwm"))
# ------------------------------------------------------------------------------------------


@pytest.fixture
def rwm():
    register(Method("rwm", RWMOptions, build=build_rwm, summary="random-walk Metropolis (test)"))
    yield "rwm"
    unregister("rwm")


SIGMA = 0.5


def linreg(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, SIGMA * s), obs=y)


def _linreg_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    return x, (x @ np.array([1.0, -0.5]) + SIGMA * rng.normal(size=n)).astype(np.float32)


def test_toy_method_through_fit_predict_arviz_save_load_resume_and_cli(rwm, tmp_path, monkeypatch):
    x, y = _linreg_data()
    post = bnnpp.fit(linreg, (x, y), method=rwm, seed=0, progress=False)
    assert post.samples["w"].shape == (1, 100, 2) and post.samples["s"].shape == (1, 100)
    assert np.all(post.samples["s"] > 0)  # constrained values
    assert post.stats.sample_stats["lp"].shape == (1, 100)
    np.testing.assert_allclose(post.samples["w"].mean(axis=(0, 1)), [1.0, -0.5], atol=0.25)
    pred = post.predict(x[:5])
    assert pred.draws.shape == (100, 5)
    idata = post.to_arviz()
    assert {"posterior", "log_likelihood", "sample_stats", "observed_data"} <= set(group_names(idata))
    post.save(tmp_path / "rwm.nc")
    back = bnnpp.load(tmp_path / "rwm.nc", model=linreg)
    assert back.method == "rwm"
    np.testing.assert_array_equal(back.samples["w"], post.samples["w"])
    np.testing.assert_allclose(back.predict(x[:5]).draws, pred.draws, rtol=1e-6)
    # the runner gives it checkpoints: stopped after its first chunk and resumed, the same fit
    with monkeypatch.context() as m:
        interrupt_after(m, 1)
        with pytest.raises(TrainingInterrupted):
            bnnpp.fit(linreg, (x, y), method=rwm, seed=0, progress=False, checkpoint_dir=tmp_path / "ck")
    resumed = bnnpp.fit(linreg, (x, y), method=rwm, seed=0, progress=False, checkpoint_dir=tmp_path / "ck", resume=True)
    np.testing.assert_array_equal(resumed.samples["w"], post.samples["w"])
    # and `bnnpp fit`'s parser offers it, with its flags (the `--help` text printed without
    # loading JAX is a snapshot of the built-in methods' parser: python -m bnnpp.cli._help_snapshot)
    from bnnpp.cli._help_snapshot import render

    shown = render("fit")
    assert "rwm" in shown and "--step-size" in shown
    with pytest.raises(ValueError, match="does not take option"):
        bnnpp.fit(linreg, (x, y), method=rwm, num_chains=2)
    with pytest.raises(ValueError, match="step_size must be a positive number"):
        bnnpp.fit(linreg, (x, y), method=rwm, step_size=-1.0)


def test_toy_method_through_compare_and_sweep(rwm):
    moons = bnnpp.data.load_synthetic("moons", seed=0)
    model = bnnpp.models.mlp((3,), num_classes=2, prior=bnnpp.priors.normal(1.0))
    results, posts = compare.compare_methods(model, moons, [rwm, "map"], quick=True, progress=False)
    assert 0.0 <= results["methods"][rwm]["accuracy"] <= 1.0
    assert results["methods"][rwm]["loo_elpd"] is not None
    configs = sweep.grid(("normal",), ("fixed",), (0.5, 2.0))
    out = sweep.sweep([moons], configs, method=rwm, seeds=(0, 1), hidden=(3,), progress=False, num_steps=200, num_samples=20)
    assert len(out["runs"]) == 4 and out["compiled_groups"] == 1
    one = sweep.sweep([moons], configs[:1], method=rwm, seeds=(1,), hidden=(3,), vmap=False, progress=False, num_steps=200, num_samples=20)
    vmapped = [r for r in out["runs"] if r["label"] == configs[0].label and r["seed"] == 1][0]
    np.testing.assert_allclose(vmapped["accuracy"], one["runs"][0]["accuracy"], atol=1e-6)


# ------------------------------------------------------------ promises of every method

QUICK = {m: get_method(m).smoke for m in bnnpp.registered()}  # the smoke settings each method carries (Method.smoke)


def _quick(method):
    return get_method(method).smoke


def test_a_method_checks_its_smoke_settings():
    with pytest.raises(ValueError, match="'rwm2': smoke settings: .*num_steps"):
        Method("rwm2", RWMOptions, build=build_rwm, smoke={"num_steps": -1})
    with pytest.raises(ValueError, match="smoke settings: .*does not take option.s. num_step;"):
        Method("rwm2", RWMOptions, build=build_rwm, smoke={"num_step": 5})


@pytest.fixture(scope="module")
def moons():
    return bnnpp.data.load_synthetic("moons", seed=0)


@pytest.fixture(scope="module")
def net():
    return bnnpp.models.mlp((4,), num_classes=2, prior=bnnpp.priors.normal(bnnpp.priors.half_normal(1.0)))


# mclmc, meads and pathfinder: three fits of a compile-heavy program, 60-85 s each on 2 loaded cores (slow);
# their fast siblings are tests/test_backends.py's conjugate cases (groups, save/load, predict)
SLOW_CONTRACT = ("mclmc", "meads", "pathfinder")


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW_CONTRACT else m for m in bnnpp.registered()])
def test_every_method_keeps_the_contract(method, moons, net, tmp_path, monkeypatch):
    post = bnnpp.fit(net, moons, method=method, seed=3, progress=False, **_quick(method))
    sites = latent_sites(net, moons.x_train, moons.y_train)
    assert set(post.samples) == set(sites)
    for name, site in sites.items():
        assert post.samples[name].shape == (post.num_chains, post.num_draws, *site.shape)
        assert np.all(np.isfinite(post.samples[name]))
    assert post.method == method and post.stats.options == get_method(method).check_options(_quick(method))
    idata = post.to_arviz()
    assert {"posterior", "posterior_predictive", "observed_data", "constant_data"} <= set(group_names(idata))
    # a one-draw fit (map) has no log_likelihood group: PSIS-LOO needs draws (issue 19)
    assert ("log_likelihood" in group_names(idata)) == (post.num_chains * post.num_draws > 1)
    for name, site in sites.items():
        assert idata.posterior[name].dims == ("chain", "draw", *site.dims)
    post.save(tmp_path / "p.nc")
    back = bnnpp.load(tmp_path / "p.nc")
    for name in sites:
        np.testing.assert_array_equal(back.samples[name], post.samples[name])
    assert type(back.approximation) is type(post.approximation)
    assert back.stats.traces.keys() == post.stats.traces.keys()
    assert back.stats.sample_stats.keys() == post.stats.sample_stats.keys()
    np.testing.assert_allclose(back.predict(moons.x_test[:7]).probs, post.predict(moons.x_test[:7]).probs, rtol=1e-6)
    # the same seed again, stopped by a signal after its first chunk and resumed from the
    # checkpoint, gives the same fit bit for bit
    with monkeypatch.context() as m:
        interrupt_after(m, 1)
        with pytest.raises(TrainingInterrupted):
            bnnpp.fit(net, moons, method=method, seed=3, progress=False, checkpoint_dir=tmp_path / "ck", **_quick(method))
    again = bnnpp.fit(net, moons, method=method, seed=3, progress=False, checkpoint_dir=tmp_path / "ck", resume=True,
                      **_quick(method))
    for name in sites:
        np.testing.assert_array_equal(again.samples[name], post.samples[name])
    for group, resumed in ((post.stats.traces, again.stats.traces), (post.stats.sample_stats, again.stats.sample_stats)):
        assert group.keys() == resumed.keys()
        for k in group:
            np.testing.assert_array_equal(resumed[k], group[k])
    assert again.stats.steps_run == post.stats.steps_run


SWEEP = {  # smaller still: the sweep traces the whole fit into one program per method
    "map": {"num_steps": 20}, "laplace": {"num_steps": 20, "num_samples": 5}, "advi": {"num_steps": 20, "num_samples": 5},
    "bbb": {"epochs": 20, "num_samples": 5}, "sgld": {"num_chains": 1, "burn_in": 10, "num_samples": 5, "thinning": 1},
    "nuts": {"num_chains": 1, "num_warmup": 10, "num_samples": 5, "max_tree_depth": 4},
    "ensemble": {"num_steps": 20, "members": 2}, "mc_dropout": {"num_steps": 20, "num_samples": 5}, "vd": {"epochs": 20, "num_samples": 5},
    "swag": {"pretrain_steps": 10, "swag_epochs": 2, "rank": 2, "num_samples": 5},
    "multiswag": {"pretrain_steps": 10, "swag_epochs": 2, "rank": 2, "num_samples": 5, "members": 2},
}


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in ("nuts", *SLOW_CONTRACT) else m for m in bnnpp.registered()])
def test_every_method_sweeps_vmapped(method):
    """Every registered method traces whole inside the sweep's vmap over seeds: one program,
    a finite score per seed, and different seeds give different fits."""
    data = bnnpp.data.moons(n=60)
    configs = sweep.grid(("normal",), ("fixed",), fixed_scales=(1.0,))
    out = sweep.sweep([data], configs, method=method, seeds=(0, 1), hidden=(3,), progress=False, **SWEEP.get(method, _quick(method)))
    assert out["compiled_groups"] == 1 and len(out["runs"]) == 2
    for run in out["runs"]:
        assert 0.0 <= run["accuracy"] <= 1.0 and np.isfinite(run["nll"]) and run["stopped_at"] is None


def exploding(x, y=None):
    """The log joint turns NaN once w passes 2; the data pull w towards 5 from its start near 0."""
    w = numpyro.sample("w", dist.Normal(0.0, 10.0))
    numpyro.factor("cliff", jnp.where(w > 2.0, jnp.nan, 0.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x[:, 0], 0.5), obs=y)


NAN_OPTIONS = {
    "map": {"num_steps": 400, "learning_rate": 0.05, "init_radius": 0.1},
    "advi": {"num_steps": 400, "learning_rate": 0.05, "init_radius": 0.1, "num_samples": 10},
    "bbb": {"epochs": 400, "learning_rate": 0.05, "init_radius": 0.1, "init_loc": "uniform", "num_samples": 10},
    "sgld": {"num_chains": 1, "burn_in": 0, "num_samples": 400, "thinning": 1, "variant": "sgld", "step_size": 1e-3, "init_radius": 0.1},
    "ensemble": {"num_steps": 400, "learning_rate": 0.05, "init_radius": 0.1, "members": 1},
    "swag": {"pretrain_steps": 400, "learning_rate": 0.05, "init_radius": 0.1, "batch_size": 10, "swag_epochs": 4, "rank": 2},
}


@pytest.mark.parametrize("method", bnnpp.registered())
def test_every_runner_method_stops_at_the_first_nonfinite_step(method):
    if method not in NAN_OPTIONS:
        pytest.skip(f"no NaN scenario for {method}")
    x = np.ones((50, 1), np.float32)
    y = np.full(50, 5.0, np.float32)
    with pytest.warns(RuntimeWarning, match="NaN/inf at step"):
        post = bnnpp.fit(exploding, (x, y), method=method, seed=0, progress=False, **NAN_OPTIONS[method])
    assert post.stats.stopped_at is not None and post.stats.stopped_at > 0
    for v in post.samples.values():
        assert np.all(np.isfinite(v))
    if post.stats.traces:
        loss = post.stats.traces["loss"]
        assert np.all(np.isfinite(loss[:-1])) and not np.isfinite(loss[-1])


def test_every_option_is_documented_and_typed():
    for name in bnnpp.registered():
        method = get_method(name)
        for spec in method.options.specs():
            assert spec.help, f"{name}.{spec.name} has no help text"
            if spec.flag is not None:
                assert spec.type in (int, float, str, bool), f"{name}.{spec.name}: CLI type {spec.type}"
        assert method.defaults == {s.name: s.default for s in method.options.specs()}


def test_old_paths_warn_and_still_work():
    with pytest.warns(DeprecationWarning, match="moved to bnnpp.posterior.Posterior"):
        from bnnpp.inference.base import Posterior
    assert Posterior is bnnpp.Posterior
    with pytest.warns(DeprecationWarning, match="map_estimate"):
        from bnnpp.inference import map as old_map  # noqa: F401
    assert old_map.build is bnnpp.inference.map_estimate.build


def test_guarded_trace_fit_stops_where_fit_does_inside_vmap():
    """benchmarks/uci.py fits all splits in one vmap-ed guarded_trace_fit: each fit stops at its
    own first non-finite step with the state before it, as bnnpp.fit does (trace_fit steps on)."""
    from bnnpp.inference.runner import guarded_trace_fit, trace_fit

    x = np.ones((50, 1), np.float32)
    y = np.full(50, 5.0, np.float32)
    options = NAN_OPTIONS["map"]
    with pytest.warns(RuntimeWarning, match="NaN/inf at step"):
        post = bnnpp.fit(exploding, (x, y), method="map", seed=0, progress=False, **options)
    chosen = get_method("map")
    alg = chosen.build(exploding, x, y, chosen.parse(options))
    ys = jnp.stack([jnp.asarray(y), jnp.zeros(50)])  # the second fit never leaves w < 2: no stop
    draws, _, stopped_at = jax.jit(jax.vmap(lambda yy: guarded_trace_fit(alg, jax.random.PRNGKey(0), jnp.asarray(x), yy)))(ys)
    assert int(stopped_at[0]) == post.stats.stopped_at and int(stopped_at[1]) == -1
    np.testing.assert_allclose(np.asarray(draws["w"][0]), post.samples["w"].reshape(-1), rtol=1e-6)
    assert np.all(np.isfinite(np.asarray(draws["w"])))
    assert np.all(np.asarray(draws["w"][0]) < 2.5)  # stopped at the cliff (w just past 2)
    unguarded, _ = trace_fit(alg, jax.random.PRNGKey(0), jnp.asarray(x), jnp.asarray(y))
    assert np.all(np.asarray(unguarded["w"]) > 4.0)  # trace_fit steps on past the NaN loss, to the data
