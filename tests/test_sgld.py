"""The ``sgld`` backend: option checks, step-size schedules, the N/n gradient scaling,
sample statistics and hierarchical models (the conjugate and moons checks of every variant
live in tests/test_backends.py)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp import priors
from bnnpp.inference.sgld import DEFAULTS, Schedule, grad_estimator, logdensity_estimator

SIGMA = 0.5


def linreg(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, SIGMA), obs=y)


def _data(n: int = 100, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([1.5, -0.7, 0.8]) + rng.normal(0, SIGMA, n)).astype(np.float32)
    return x, y


FAST = {"num_samples": 50, "burn_in": 100, "thinning": 2, "num_chains": 2}


# --------------------------------------------------------------------------------------
# Bad input: one-line ValueError, nothing compiled
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, match",
    [
        ({"step_size": 0}, "step_size must be a positive number"),
        ({"step_size": -1}, "step_size must be a positive number"),
        ({"step_size": float("nan")}, "step_size must be a positive number"),
        ({"num_chains": 0}, "num_chains must be an integer ≥ 1"),
        ({"batch_size": 1000}, r"batch_size 1000 is larger than the 100 training rows; use batch_size ≤ 100 or None"),
        ({"batch_size": 0}, "batch_size must be an integer ≥ 1"),
        ({"variant": "sgnht"}, "variant must be one of sgld, psgld, sghmc"),
        ({"schedule": "cosine"}, "schedule must be one of constant, polynomial, cyclical"),
        ({"burn_in": -1}, "burn_in must be an integer ≥ 0"),
        ({"gamma": 0.3}, r"gamma must be a number in \(0.5, 1\]"),
        ({"exploration": 1.0}, r"exploration must be a number in \[0, 1\)"),
        ({"schedule": "cyclical", "num_samples": 10, "num_cycles": 3}, "must be a multiple of num_cycles"),
        ({"rms_decay": 1.0}, r"rms_decay must be a number in \(0, 1\)"),
        ({"variant": "sghmc", "friction": 2000.0}, "friction × step_size must be < 1"),
        ({"members": 10}, "does not take option"),  # num_steps is taken since issue 19 (vocabulary)
        ({"num_steps": 10, "burn_in": 5}, "pass either num_steps or burn_in"),
    ],
)
def test_bad_options_raise_before_compiling(options, match, compile_counter):
    before = compile_counter()
    with pytest.raises(ValueError, match=match) as err:
        bnnpp.fit(linreg, _data(), method="sgld", progress=False, **options)
    assert "\n" not in str(err.value)
    assert compile_counter() == before


# --------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------


def _schedule(**kw) -> Schedule:
    return Schedule.from_options({**DEFAULTS, **kw})


def test_constant_schedule_keeps_the_last_step_of_every_thinning_block():
    s = _schedule(step_size=0.01, burn_in=7, thinning=3, num_samples=5)
    t = np.arange(s.num_steps)
    assert s.num_steps == 7 + 5 * 3
    np.testing.assert_allclose(s.step_size_at(t), 0.01)
    np.testing.assert_array_equal(s.kept_steps(), 7 + 3 * np.arange(1, 6) - 1)
    np.testing.assert_array_equal(s.draw_index(s.kept_steps()), np.arange(5))
    assert not s.explores(t).any()


def test_polynomial_schedule_decays_as_specified():
    s = _schedule(
        schedule="polynomial", step_size=0.1, decay_steps=50.0, gamma=0.55, burn_in=10, thinning=4, num_samples=30
    )
    t = np.arange(s.num_steps)
    h = s.step_size_at(t)
    np.testing.assert_allclose(h, 0.1 * (1 + t / 50.0) ** -0.55, rtol=1e-12)
    assert h[0] == pytest.approx(0.1)
    assert np.all(np.diff(h) < 0)
    # the compiled step evaluates the same schedule in float32
    np.testing.assert_allclose(jax.jit(s.step_size_at)(jnp.arange(s.num_steps)), h, rtol=1e-5)


def test_cyclical_schedule_restarts_each_cycle_and_keeps_only_sampling_steps():
    h0, burn_in, thinning, num_samples, cycles, beta = 0.2, 7, 3, 12, 3, 0.25
    s = _schedule(
        schedule="cyclical", step_size=h0, burn_in=burn_in, thinning=thinning, num_samples=num_samples,
        num_cycles=cycles, exploration=beta,
    )
    sampling = num_samples // cycles * thinning  # 12 noisy steps per cycle
    length = sampling + math.ceil(beta * sampling / (1 - beta))  # + 4 exploration steps
    assert (s.sampling_steps, s.cycle_length, s.exploration_steps) == (sampling, length, length - sampling)
    assert s.num_steps == burn_in + cycles * length
    t = np.arange(s.num_steps)
    h = s.step_size_at(t)
    j = (t - burn_in) % length
    # burn-in at the base step size, then Zhang et al.'s cosine within each cycle
    np.testing.assert_allclose(h[:burn_in], h0)
    np.testing.assert_allclose(h[burn_in:], h0 / 2 * (np.cos(np.pi * j[burn_in:] / length) + 1), rtol=1e-12)
    starts = burn_in + length * np.arange(cycles)
    np.testing.assert_allclose(h[starts], h0)  # restart at the start of every cycle
    for c in starts:
        assert np.all(np.diff(h[c : c + length]) < 0)
    # exploration = the first E steps of each cycle
    np.testing.assert_array_equal(s.explores(t), (t >= burn_in) & (j < length - sampling))
    kept = s.kept_steps()
    assert len(kept) == num_samples
    np.testing.assert_array_equal(s.draw_index(kept), np.arange(num_samples))
    assert not s.explores(kept).any()  # every kept step lies in a sampling stage
    assert np.all(kept >= burn_in)
    np.testing.assert_array_equal(np.bincount((kept - burn_in) // length), [num_samples // cycles] * cycles)
    # kept: every thinning-th step of each sampling stage, counted from its start
    np.testing.assert_array_equal((j[kept] - (length - sampling) + 1) % thinning, 0)
    # JAX and NumPy agree
    tj = jnp.arange(s.num_steps)
    np.testing.assert_allclose(jax.jit(s.step_size_at)(tj), h, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(jax.jit(s.draw_index)(tj), s.draw_index(t))


@pytest.mark.parametrize("schedule", ["constant", "cyclical"])
def test_segments_end_at_every_kept_step(schedule):
    s = _schedule(schedule=schedule, burn_in=1000, thinning=2, num_samples=40, num_cycles=4, exploration=0.5)
    ends, keep = s.segments()
    np.testing.assert_array_equal(ends[keep] - 1, s.kept_steps())
    assert ends[-1] == s.num_steps and np.all(np.diff(ends) > 0)
    lengths = np.diff(np.concatenate([[0], ends]))
    assert lengths.max() <= max(s.thinning, math.ceil(s.num_steps / 100))


# --------------------------------------------------------------------------------------
# The N/n gradient scaling
# --------------------------------------------------------------------------------------


def test_batch_gradient_estimates_average_to_the_full_gradient():
    x, y = _data(n=120)
    n, b = x.shape[0], 20
    key = jax.random.PRNGKey(0)
    g = jax.jit(grad_estimator(linreg, n, key))
    f = jax.jit(lambda u, batch: logdensity_estimator(linreg, n, key)(u, batch)[0])
    u = {"w": jnp.array([0.3, -1.2, 2.0])}
    full = np.asarray(g(u, (x, y))["w"])
    perm = np.random.default_rng(1).permutation(n)
    batches = [perm[i : i + b] for i in range(0, n, b)]
    estimates = np.stack([np.asarray(g(u, (x[i], y[i]))["w"]) for i in batches])
    assert not np.allclose(estimates[0], full, rtol=1e-2)  # one batch alone is noisy
    np.testing.assert_allclose(estimates.mean(0), full, rtol=1e-5, atol=1e-3)
    # the log-density estimate too: log prior + (N/B) · log-likelihood of the batch
    values = [float(f(u, (x[i], y[i]))) for i in batches]
    np.testing.assert_allclose(np.mean(values), float(f(u, (x, y))), rtol=1e-5)
    # and the full gradient is the gradient of the log joint
    lp = dist.Normal(0.0, 1.0).log_prob(u["w"]).sum() + dist.Normal(x @ u["w"], SIGMA).log_prob(y).sum()
    np.testing.assert_allclose(float(f(u, (x, y))), float(lp), rtol=1e-5)


# --------------------------------------------------------------------------------------
# Sample statistics, hierarchical models, NaN guard
# --------------------------------------------------------------------------------------


def test_sample_stats_step_size_per_draw():
    x, y = _data()
    opts = {**FAST, "schedule": "polynomial", "step_size": 1e-3, "decay_steps": 20.0, "preconditioner": "adaptive"}
    post = bnnpp.fit(linreg, (x, y), method="sgld", seed=0, progress=False, **opts)
    assert post.samples["w"].shape == (2, 50, 3)
    stats = post.to_arviz().sample_stats
    assert stats.step_size.dims == ("chain", "draw")
    assert stats.step_size.shape == (2, 50)
    sched = Schedule.from_options({**DEFAULTS, **opts})
    np.testing.assert_allclose(stats.step_size.values[1], sched.step_size_at(sched.kept_steps()))
    assert stats.lp.dims == ("chain", "draw") and np.all(np.isfinite(stats.lp.values))
    info = post.info
    assert info["method"] == "sgld" and info["steps_run"] == sched.num_steps and info["stopped_at"] is None
    assert {"compile_seconds", "run_seconds", "sample_seconds"} <= set(info)
    assert not np.allclose(post.samples["w"][0], post.samples["w"][1])  # chains are independent


@pytest.mark.parametrize(
    "options",
    [
        {"variant": "sgld", "schedule": "cyclical", "batch_size": 32, "num_cycles": 2},
        {"variant": "psgld", "schedule": "polynomial", "batch_size": 50},
        {"variant": "sghmc", "num_integration_steps": 3},
    ],
    ids=["sgld-cyclical-batch", "psgld-polynomial-batch", "sghmc"],
)
def test_hierarchical_scales_are_sampled_positive(options):
    data = bnnpp.data.moons(n=150)
    model = bnnpp.models.mlp((3,), num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    post = bnnpp.fit(model, data, method="sgld", seed=0, progress=False, **{**FAST, **options})
    variance = post.samples["dense_0.variance"]
    assert variance.shape[:2] == (2, 50)
    assert np.all(np.isfinite(variance)) and np.all(variance > 0)
    assert np.unique(variance).size > 10  # the scale moves
    assert post.info["stopped_at"] is None


def test_nan_guard_keeps_the_draws_before_the_chains_blow_up():
    x, y = _data()
    with pytest.warns(RuntimeWarning, match="NaN/inf"):
        post = bnnpp.fit(linreg, (x, y), method="sgld", seed=0, progress=False, variant="sgld", step_size=0.01, burn_in=0, thinning=5,
                         num_samples=100, num_chains=2)
    draws = post.samples["w"]
    assert 0 < draws.shape[1] < 100 and np.all(np.isfinite(draws))
    assert post.info["stopped_at"] is not None and post.info["stopped_at"] >= 5
    assert post.info["sample_stats"]["step_size"].shape == draws.shape[:2]
    with pytest.raises(RuntimeError, match="before the first kept draw; lower step_size"), pytest.warns(RuntimeWarning):
        bnnpp.fit(linreg, (x, y), method="sgld", seed=0, progress=False, variant="sgld", step_size=10.0, burn_in=200, num_samples=10,
                  num_chains=2)


def test_default_start_is_glorot_for_layer_weights_and_zero_for_biases():
    """The chains start with each layer's weights U(±sqrt(6/(fan_in + fan_out))) and zero
    biases; the hierarchical scale keeps U(±init_radius) on its unconstrained space."""
    from bnnpp.inference.registry import get_method

    x = np.random.default_rng(0).standard_normal((64, 30)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    net = bnnpp.models.mlp((40,), num_classes=2, prior=priors.normal(priors.half_normal(1.0)))
    method = get_method("sgld")
    options = method.parse({"num_chains": 3})
    assert (options.variant, options.init_loc) == ("psgld", "glorot")
    state = method.build(net, x, y, options).init(jax.random.PRNGKey(0), (x, y))
    u = state.position
    w0, b0 = np.asarray(u["dense_0.w"]), np.asarray(u["dense_0.b"])
    assert w0.shape == (3, 30, 40) and np.abs(w0).max() <= math.sqrt(6 / 70) and np.abs(w0).max() > 0.9 * math.sqrt(6 / 70)
    assert np.all(b0 == 0.0)
    scale = np.asarray(u["dense_0.scale"])  # (3,): P(all 3 within ±0.29 under U(±2)) ≈ 0.3%
    assert scale.shape == (3,) and np.abs(scale).max() <= 2.0 and np.abs(scale).max() > math.sqrt(6 / 70)


@pytest.mark.slow  # three LeNet-5 compiles, about 75 s on 2 cores
def test_defaults_sample_a_cnn_where_plain_sgld_from_a_uniform_start_overflows():
    """LeNet-5 on 2,048 images: the defaults (psgld, Glorot start) give finite chains that
    learn (chance is 0.1); the former defaults (sgld, h = 1e-3, weights U(±2)) overflow at
    the first steps, because the full-scale gradient N/B·Σ∇ of a saturated CNN makes h·ĝ huge."""
    from bnnpp import metrics

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (2048, 28, 28, 1)).astype(np.float32)
    y = np.argmax(x.reshape(2048, -1) @ rng.standard_normal((784, 10)), 1)
    small = {"num_steps": 60, "batch_size": 64, "num_samples": 5, "num_chains": 1}
    post = bnnpp.fit(bnnpp.models.lenet5(), (x, y), method="sgld", seed=0, progress=False, **small)
    assert post.info["stopped_at"] is None
    assert metrics.accuracy(post.predict(x[:500]).mean, y[:500]) > 0.3  # 0.75 seen
    with pytest.raises(RuntimeError, match="NaN/inf"), pytest.warns(RuntimeWarning):
        bnnpp.fit(bnnpp.models.lenet5(), (x, y), method="sgld", seed=0, progress=False, variant="sgld", init_loc="uniform", **small)


def test_fisher_metric_samples_at_its_own_step_and_auto_picks_it_off_networks(moons):
    """preconditioner="fisher": after the burn-in the kept steps run at fisher_step_size times
    the schedule's shape; "auto" is fisher for a hand-written model, adaptive for a network."""
    from bnnpp.inference.sgld import SGLDOptions, _preconditioner

    x, y = _data()
    opts = {**FAST, "schedule": "polynomial", "step_size": 1e-3, "decay_steps": 20.0, "fisher_step_size": 0.1}
    post = bnnpp.fit(linreg, (x, y), method="sgld", seed=0, progress=False, **opts)
    sched = Schedule.from_options({**DEFAULTS, **opts})
    kept = post.to_arviz().sample_stats.step_size.values[0]
    np.testing.assert_allclose(kept, 0.1 * sched.step_size_at(sched.kept_steps()) / 1e-3, rtol=1e-6)
    assert np.all(np.isfinite(post.samples["w"]))
    net = bnnpp.models.mlp((3,), num_classes=2)
    assert _preconditioner(SGLDOptions(), linreg, x, y) == "fisher"
    assert _preconditioner(SGLDOptions(), net, moons.x_train, moons.y_train) == "adaptive"
    assert _preconditioner(SGLDOptions(variant="sgld"), linreg, x, y) is None
