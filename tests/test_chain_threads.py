"""NUTS's chains in groups, one thread each, on a multi-core CPU (``bnnpp.inference.chain_threads``):
when the runner groups, the joined fit is right (a conjugate posterior), and the knob's errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp.inference import chain_threads
from bnnpp.inference.algorithm import RunSpec


class _Alg:
    def __init__(self, **run):
        self.run = RunSpec(num_steps=10, **run)


class _RS:
    def __init__(self, chains):
        self.state = {"z": jax.ShapeDtypeStruct((chains, 3), jnp.float32), "k": jax.ShapeDtypeStruct((chains, 2), jnp.uint32)}


emit = lambda key, state: ({}, {})  # noqa: E731


@pytest.mark.parametrize(
    ("threads", "chains", "run", "placed", "expected"),
    [
        ("2", 4, {"independent_chains": True, "emit": emit}, False, 2),
        ("3", 4, {"independent_chains": True, "emit": emit}, False, 2),  # the largest divisor of 4 up to 3
        ("8", 4, {"independent_chains": True, "emit": emit}, False, 4),
        ("2", 3, {"independent_chains": True, "emit": emit}, False, 1),  # 3 chains do not split in two
        ("1", 4, {"independent_chains": True, "emit": emit}, False, 1),  # off
        ("2", 4, {"emit": emit}, False, 1),  # chains that meet (a shared adaptation throughout)
        ("2", 4, {"independent_chains": True, "emit": emit, "chains_from": 2}, False, 1),  # too few steps after the warm-up
        ("2", 4, {"independent_chains": True}, False, 1),  # not an emitting sampler
        ("2", 4, {"independent_chains": True, "emit": emit}, True, 1),  # on a mesh the mesh places the chains
    ],
)
def test_how_many_groups(monkeypatch, threads, chains, run, placed, expected):
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", threads)
    assert chain_threads.chain_groups(_Alg(num_chains=chains, **run), placed, _RS(chains)) == expected


def test_only_a_fit_on_the_cpu_is_grouped(monkeypatch):
    # NUTS's device="auto" runs a small problem on the CPU of a GPU machine: the fit's platform decides
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", "2")
    alg = _Alg(num_chains=4, independent_chains=True, emit=emit)
    assert chain_threads.chain_groups(alg, False, _RS(4), "cpu") == 2
    assert chain_threads.chain_groups(alg, False, _RS(4), "gpu") == 1


def test_a_state_leaf_that_is_not_per_chain_is_not_split(monkeypatch):
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", "2")
    rs = _RS(4)
    rs.state["shared"] = jax.ShapeDtypeStruct((3,), jnp.float32)
    assert chain_threads.chain_groups(_Alg(num_chains=4, independent_chains=True, emit=emit), False, rs) == 1
    # unless the algorithm says which parts are shared
    axes = {"z": True, "k": True, "shared": False}
    alg = _Alg(num_chains=4, independent_chains=True, emit=emit, chain_axes=axes)
    assert chain_threads.chain_groups(alg, False, rs) == 2
    from bnnpp.inference.chunks import RunState

    group = chain_threads.group_shape(alg.run, RunState(rs.state, None, None), 2).state
    assert group["z"].shape == (2, 3) and group["shared"].shape == (3,)


def test_shared_parts_go_whole_to_every_group_and_come_back_once():
    run = RunSpec(num_steps=1, chain_axes={"z": True, "tuning": False})
    state = {"z": jnp.arange(8.0).reshape(4, 2), "tuning": jnp.asarray([1.0, 2.0, 3.0, 4.0])}  # as long as the chains, not per chain
    parts = chain_threads._split(run, state, 2)
    assert [p["z"].shape for p in parts] == [(2, 2), (2, 2)]
    assert all(np.array_equal(p["tuning"], state["tuning"]) for p in parts)
    joined = chain_threads._join(run, parts)
    np.testing.assert_array_equal(joined["z"], state["z"])
    np.testing.assert_array_equal(joined["tuning"], state["tuning"])


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_thread_count_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", value)
    with pytest.raises(ValueError, match="BNNPP_CHAIN_THREADS must be a positive integer"):
        chain_threads.chain_groups(_Alg(num_chains=4, independent_chains=True, emit=emit), False, _RS(4))


def _normal_mean(x, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def grouped_conjugate_fit(monkeypatch, method, **options):
    """A ``method`` fit of y_i ~ N(mu, 1), mu ~ N(0, 1) to 40 draws of N(1.5, 1), 4 chains × 1,000
    draws in two groups of chains (``BNNPP_CHAIN_THREADS=2``; samplers with a shared warm-up
    grouped from 10 kept steps on), checked against the posterior N(sum(y) / (n + 1), 1 / (n + 1)):
    with ESS ~ 1,000-4,000 the mean's Monte-Carlo error is ~0.03 sd, so 0.2 sd is > 6 of them; the
    sd's relative error ~2-3%, so 10%. Returns ``(posterior, x, y)``."""
    monkeypatch.setattr(chain_threads, "MIN_GROUPED_STEPS", 10)
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", "2")
    rng = np.random.default_rng(0)
    y = rng.normal(1.5, 1.0, 40).astype(np.float32)
    x = np.zeros((40, 1), np.float32)
    post = bnnpp.fit(_normal_mean, (x, y), method=method, progress=False, num_chains=4, num_samples=1000, **options)
    assert post.stats.extras["chain_threads"] == 2
    mu = np.asarray(post.samples["mu"])
    assert mu.shape == (4, 1000) and post.stats.sample_stats["n_steps"].shape == (4, 1000)
    mean, sd = y.sum() / 41, 1 / np.sqrt(41)
    assert abs(mu.mean() - mean) < 0.2 * sd and mu.std() == pytest.approx(sd, rel=0.1)
    assert len({float(m) for m in mu[:, 0]}) == 4  # four different chains, not one group twice
    return post, x, y


def test_grouped_nuts_samples_the_conjugate_posterior(monkeypatch):
    grouped_conjugate_fit(monkeypatch, "nuts", seed=1, num_warmup=300)


def test_one_thread_runs_one_program(monkeypatch):
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", "1")
    x = np.zeros((10, 1), np.float32)
    y = np.ones(10, np.float32)
    post = bnnpp.fit(_normal_mean, (x, y), method="nuts", seed=0, progress=False, num_chains=2, num_warmup=20, num_samples=20)
    assert "chain_threads" not in post.stats.extras


def test_threaded_joins_the_groups_states_flags_and_rows_in_chain_order():
    from concurrent.futures import ThreadPoolExecutor

    from bnnpp.inference.chunks import RunState

    def program(carry, start, data):  # one group's chunk of 3 units: chain i's value + 1, rows (unit, chain)
        rs, stopped, bad = carry
        z = rs.state["z"] + 1
        first = int(z[0, 0])
        broke = first == 11  # the second group (chains 2, 3 start at 10, 11) stops at unit start + 1
        rows = ({"loss": jnp.tile(z[:, 0], (3, 1))}, {"draw": jnp.tile(z[None], (3, 1, 1))}, jnp.arange(3) + start)
        return (rs._replace(state={"z": z}, t=rs.t + 3), jnp.bool_(broke), jnp.int32(start + 1 if broke else -1)), rows

    state = {"z": jnp.asarray([[0.0], [1.0], [10.0], [11.0]])}
    with ThreadPoolExecutor(2) as pool:
        call = chain_threads.threaded(program, 2, pool, RunSpec(num_steps=3))
        (rs, stopped, bad), (info, emitted, unit) = call(
            (RunState(state, jnp.int32(0), jnp.zeros((0,))), np.bool_(False), np.int32(-1)), 5, None
        )
    np.testing.assert_array_equal(np.asarray(rs.state["z"])[:, 0], [1, 2, 11, 12])
    assert int(rs.t) == 3 and bool(stopped) and int(bad) == 6
    assert info["loss"].shape == (3, 4) and emitted["draw"].shape == (3, 4, 1)
    np.testing.assert_array_equal(np.asarray(info["loss"])[0], [1, 2, 11, 12])
    np.testing.assert_array_equal(np.asarray(unit), [5, 6, 7])


def test_grouped_mclmc_keeps_its_shared_warmup_and_samples_the_conjugate_posterior(monkeypatch):
    # mclmc's chains share the warm-up (step size, trajectory length, mass matrix), so only its
    # kept steps run in groups: the warm-up's outcome is the one-program fit's bit for bit
    pytest.importorskip("blackjax.mcmc.adjusted_mclmc_dynamic")
    grouped, x, y = grouped_conjugate_fit(monkeypatch, "mclmc", seed=3, num_warmup=200)
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", "1")
    single = bnnpp.fit(_normal_mean, (x, y), method="mclmc", seed=3, progress=False, num_chains=4, num_warmup=200, num_samples=1000)
    assert "chain_threads" not in single.stats.extras
    assert grouped.stats.extras["step_size"] == single.stats.extras["step_size"]
    assert grouped.stats.extras["inverse_mass_matrix_range"] == single.stats.extras["inverse_mass_matrix_range"]


def test_grouped_mclmc_resumes_bit_identically_after_the_warmup(monkeypatch, tmp_path):
    # interrupted in its grouped part (chunks of 10 units: 3 warm-up chunks, then grouped ones),
    # the resumed fit runs the same programs on the same chunks as the whole one
    pytest.importorskip("blackjax.mcmc.adjusted_mclmc_dynamic")
    from interrupting import interrupt_after

    from bnnpp.inference import TrainingInterrupted

    monkeypatch.setattr(chain_threads, "MIN_GROUPED_STEPS", 10)
    monkeypatch.setenv("BNNPP_CHAIN_THREADS", "2")
    rng = np.random.default_rng(1)
    x = np.zeros((20, 1), np.float32)
    y = rng.normal(1.0, 1.0, 20).astype(np.float32)
    kw = dict(method="mclmc", seed=5, progress=False, num_chains=4, num_warmup=30, num_samples=60, chunk_size=10)
    whole = bnnpp.fit(_normal_mean, (x, y), **kw)
    assert whole.stats.extras["chain_threads"] == 2
    with monkeypatch.context() as m:
        interrupt_after(m, 5)
        with pytest.raises(TrainingInterrupted) as stop:
            bnnpp.fit(_normal_mean, (x, y), checkpoint_dir=tmp_path / "ck", **kw)
    assert 30 < stop.value.step < whole.stats.steps_run  # stopped after the warm-up
    resumed = bnnpp.fit(_normal_mean, (x, y), checkpoint_dir=tmp_path / "ck", resume=True, **kw)
    np.testing.assert_array_equal(resumed.samples["mu"], whole.samples["mu"])
    for k in whole.stats.sample_stats:
        np.testing.assert_array_equal(resumed.stats.sample_stats[k], whole.stats.sample_stats[k])

