"""The many-chain samplers (``chees``, ``mclmc``) and ``pathfinder`` against closed forms, and
chees's checkpoint resume.

Target: Bayesian linear regression with a known noise, w ~ N(0, I₂), y | x, w ~ N(x·w, σ²),
whose posterior is N(m, S) with S = (I + XᵀX/σ²)⁻¹, m = S Xᵀy / σ² (Bishop 2006, eq. 3.53–3.54).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from interrupting import interrupt_after

import bnnpp
from bnnpp.inference import TrainingInterrupted
from bnnpp.inference.checks import blackjax_missing
from bnnpp.posterior import arviz_compat

SIGMA = 0.5

needs_blackjax = pytest.mark.skipif(
    blackjax_missing("mclmc") is not None, reason=f"{blackjax_missing('mclmc')} (so do chees and pathfinder)"
)
"""The tests that run chees, mclmc or pathfinder: skipped below BlackJAX 1.4 (the oldest-versions
leg of .ci/run), where they refuse in one line (the last test here)."""


def linreg(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, SIGMA), obs=y)


@pytest.fixture(scope="module", autouse=True)
def experimental_samplers():
    """chees is opt-in (importing its module registers it; mclmc and pathfinder are registered
    by default); it is taken out of the registry again after this module, so other tests see
    the default set."""
    import importlib

    from bnnpp.inference import registry

    before = set(registry.registered())
    importlib.import_module("bnnpp.inference.chees")
    yield
    for name in set(registry.registered()) - before:
        registry.unregister(name)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + SIGMA * rng.normal(size=20)).astype(np.float32)
    cov = np.linalg.inv(np.eye(2) + x.T.astype(np.float64) @ x / SIGMA**2)
    mean = cov @ x.T.astype(np.float64) @ y / SIGMA**2
    return x, y, mean, np.sqrt(np.diag(cov))


@needs_blackjax
@pytest.mark.slow  # 500 steps of 4 chains: about 30 s each on 2 shared cores
@pytest.mark.parametrize("method", ["chees", "mclmc"])
def test_sampler_matches_the_conjugate_posterior(method, data):
    x, y, mean, sd = data
    post = bnnpp.fit(linreg, (x, y), method=method, seed=1, progress=False, num_chains=4, num_warmup=200,
                     num_samples=300, init_loc="uniform")
    assert set(post.samples) == {"w"}  # the model's own site, not the non-centred one
    w = post.samples["w"].astype(np.float64)  # (4, 300, 2)
    rhat, ess, _ = arviz_compat.rhat_ess(w)
    assert np.all(rhat < 1.05) and np.all(ess > 100)
    # Monte-Carlo error of a mean: sd / sqrt(ESS); of an sd: about sd / sqrt(2 ESS) — 4 of each
    np.testing.assert_array_less(np.abs(w.mean(axis=(0, 1)) - mean), 4 * sd / np.sqrt(ess))
    np.testing.assert_array_less(np.abs(w.std(axis=(0, 1)) - sd), 4 * sd / np.sqrt(2 * ess) + 1e-3)
    stats = post.stats.sample_stats
    assert {"diverging", "acceptance_rate", "step_size", "n_steps", "lp", "energy"} <= set(stats)
    assert stats["diverging"].shape == (4, 300) and stats["diverging"].dtype == bool
    assert post.stats.extras["divergences"] == int(stats["diverging"].sum())
    assert 0.3 < stats["acceptance_rate"].mean() <= 1.0


def hierarchical(x, y=None):
    """No information in the data: the posterior is the prior, v ~ InverseGamma(3, 3) and
    w_i | v ~ N(0, v), so each w_i is marginally Student-t with 6 degrees of freedom and
    scale sqrt(b/a) = 1 (variance 6/4)."""
    v = numpyro.sample("v", dist.InverseGamma(3.0, 3.0))
    numpyro.sample("w", dist.Normal(0.0, jnp.sqrt(v)).expand([3]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y)


@needs_blackjax
@pytest.mark.slow  # 4 chains x 700 steps: 105 s on 2 cores under load (compile most of it)
def test_noncentered_draws_are_the_weights_of_the_model():
    """The chains run on z = w / sqrt(v) (noncentered=True, the default); the posterior must
    hold w itself, distributed as the closed-form Student-t marginal (scipy)."""
    from scipy import stats

    x, y = np.zeros((4, 1), np.float32), np.zeros(4, np.float32)
    post = bnnpp.fit(hierarchical, (x, y), method="mclmc", seed=2, progress=False, num_chains=4, num_warmup=200,
                     num_samples=500)
    assert set(post.samples) == {"v", "w"}
    w = post.samples["w"].astype(np.float64).reshape(4, -1)  # (chains, draws x 3)
    _, ess, _ = arviz_compat.rhat_ess(post.samples["w"].astype(np.float64))
    n = float(np.min(ess))
    assert n > 200
    # the quartiles of t_6 (±0.718): a quantile's Monte-Carlo sd is sqrt(p(1-p)/n)/density, ~0.05 at n = 200
    q = np.quantile(w, [0.25, 0.75])
    np.testing.assert_allclose(q, stats.t(6).ppf([0.25, 0.75]), atol=4 * np.sqrt(0.25 * 0.75 / n) / stats.t(6).pdf(0.718))
    v = post.samples["v"].astype(np.float64)
    # median of InverseGamma(3, 3) ≈ 0.87, density there ≈ 0.6: Monte-Carlo sd ≈ sqrt(0.25 / 200) / 0.6 ≈ 0.06
    assert abs(np.median(v) - stats.invgamma(3.0, scale=3.0).median()) < 0.15


@needs_blackjax
@pytest.mark.slow  # two L-BFGS programs to compile: 60 s on 2 cores at load average 19
def test_pathfinder_path_matches_blackjax():
    """bnnpp's path (its Gaussians scored one iterate after another) is BlackJAX's
    ``vi.pathfinder.approximate`` (scored vmapped) up to float rounding, on a correlated
    3-D Gaussian with the same key."""
    import jax
    from blackjax.vi.pathfinder import approximate as blackjax_approximate

    from bnnpp.inference.pathfinder import approximate

    prec = jnp.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 4.0]])
    logdensity = lambda u: -0.5 * u["z"] @ prec @ u["z"]
    key, u0 = jax.random.PRNGKey(0), {"z": jnp.array([1.0, -2.0, 0.5])}
    # jitted: run eagerly, the L-BFGS scan and line search compile op by op (minutes)
    ours = jax.jit(lambda k, u: approximate(k, logdensity, u, 8, maxiter=10, history=4))(key, u0)
    theirs = jax.jit(lambda k, u: blackjax_approximate(k, logdensity, u, 8, maxiter=10, maxcor=4)[0])(key, u0)
    np.testing.assert_allclose(ours.elbo, theirs.elbo, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours.position["z"], theirs.position["z"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.alpha, theirs.alpha, rtol=1e-5)


@needs_blackjax
def test_sampler_options_are_checked_before_compiling(data):
    x, y, _, _ = data
    with pytest.raises(ValueError, match="num_chains must be an integer"):
        bnnpp.fit(linreg, (x, y), method="chees", num_chains=0)
    with pytest.raises(ValueError, match="not trained in epochs"):
        bnnpp.fit(linreg, (x, y), method="mclmc", epochs=3)
    with pytest.raises(ValueError, match="init_loc must be one of"):
        bnnpp.fit(linreg, (x, y), method="chees", init_loc="map")
    with pytest.raises(ValueError, match="pass either num_steps or num_warmup"):
        bnnpp.fit(linreg, (x, y), method="chees", num_steps=10, num_warmup=5)
    opts = bnnpp.inference.get_method("chees").parse({"num_steps": 11}).resolve(20)
    assert (opts.num_warmup, opts.num_samples, opts.num_chains) == (5, 6, 8)  # 8 chains on a CPU




@needs_blackjax
def test_grouped_chees_samples_the_conjugate_posterior(monkeypatch):
    """chees shares its warm-up as mclmc does (bnnpp.inference.manychain): its kept steps run in
    two groups of chains (bnnpp.inference.chain_threads) and still follow a conjugate posterior."""
    from test_chain_threads import grouped_conjugate_fit

    grouped_conjugate_fit(monkeypatch, "chees", seed=1, num_warmup=200)


@needs_blackjax
@pytest.mark.slow  # three fits (whole, interrupted, resumed): about 25 s on 2 quiet cores
def test_chees_resume_is_bit_identical(data, tmp_path, monkeypatch):
    x, y, _, _ = data
    options = {"num_chains": 2, "num_warmup": 30, "num_samples": 20, "init_loc": "uniform", "chunk_size": 10}
    whole = bnnpp.fit(linreg, (x, y), method="chees", seed=4, progress=False, **options)
    with monkeypatch.context() as m:
        interrupt_after(m, 2)
        with pytest.raises(TrainingInterrupted) as stop:
            bnnpp.fit(linreg, (x, y), method="chees", seed=4, progress=False, checkpoint_dir=tmp_path / "ck", **options)
    assert 0 < stop.value.step < whole.stats.steps_run
    resumed = bnnpp.fit(linreg, (x, y), method="chees", seed=4, progress=False, checkpoint_dir=tmp_path / "ck", resume=True, **options)
    for k in whole.samples:
        np.testing.assert_array_equal(resumed.samples[k], whole.samples[k])
    for k in whole.stats.sample_stats:
        np.testing.assert_array_equal(resumed.stats.sample_stats[k], whole.stats.sample_stats[k])
    assert resumed.stats.extras["divergences_per_chain"] == whole.stats.extras["divergences_per_chain"]


def test_an_old_blackjax_is_refused_in_one_line(monkeypatch, tmp_path, capsys):
    """mclmc and pathfinder need BlackJAX >= 1.4: with an older one they stay registered, say why
    (Method.unavailable), and fit and compare refuse them in one line naming the upgrade, before
    any trace."""
    import importlib.metadata

    from bnnpp.compare import check_methods
    from bnnpp.inference import get_method
    from bnnpp.inference.checks import require_blackjax

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.2.4")
    for method in ("mclmc", "pathfinder"):
        with pytest.raises(ImportError, match=r"needs blackjax >= 1.4 \(installed: 1.2.4\): pip install") as err:
            require_blackjax(method)
        assert "\n" not in str(err.value)
        assert method in bnnpp.registered() and get_method(method).unavailable == str(err.value)
    assert get_method("nuts").unavailable is None
    x = np.zeros((4, 1), np.float32)
    with pytest.raises(ImportError, match="mclmc"):
        bnnpp.fit(bnnpp.models.mlp((2,), likelihood="gaussian", noise=1.0), (x, x[:, 0]), method="mclmc", progress=False)
    with pytest.raises(ImportError, match="pathfinder"):
        check_methods(["map", "pathfinder"])
    from bnnpp.cli import main

    assert main(["compare", "--data", "moons", "--methods", "map,pathfinder", "--quick", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs blackjax >= 1.4" in err, err
