"""``method="vd"``: the KL approximation against a Monte-Carlo KL, sparsity on a sparse linear
regression, the three variants' posteriors (draws, save/load, ArviZ, predict), bad options, and
``bnnpp prune`` on a vd run."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from shared_data import DATA_DIR

import bnnpp
from bnnpp import metrics, pruning
from bnnpp.cli import main
from bnnpp.inference import vd
from bnnpp.inference.vd import VariationalDropout, kl_log_uniform, kl_weight
from bnnpp.posterior.arviz_compat import group_names

REPO = Path(__file__).resolve().parents[1]


def test_kl_approximation_matches_monte_carlo():
    """Molchanov et al. (2017) §4.2: KL(N(θ, αθ²) ‖ log-uniform) = E_{z∼N(0,1)} log|α^(−1/2) + z|
    + const (the ½ log α of −KL cancels against E log|1 + √α z| = ½ log α + E log|α^(−1/2) + z|).
    The approximation (eq. 14) must differ from the Monte-Carlo estimate by one constant over
    the whole grid of log α; the paper states a maximum absolute deviation of about 0.009, so
    the spread of the difference about its midpoint may be 0.009 plus 4 Monte-Carlo standard
    errors (10⁶ draws, shared by all grid points; sd of log|c + z| ≤ 1.2, SE ≤ 0.0012)."""
    z = np.random.default_rng(0).standard_normal(1_000_000)
    grid = np.linspace(-8.0, 8.0, 33)
    logs = [np.log(np.abs(np.exp(-la / 2) + z)) for la in grid]
    mc = np.array([v.mean() for v in logs])
    se = max(v.std() for v in logs) / np.sqrt(z.size)
    diff = np.asarray(kl_log_uniform(jax.numpy.asarray(grid, jax.numpy.float32)), np.float64) - mc
    constant = (diff.max() + diff.min()) / 2
    assert np.max(np.abs(diff - constant)) <= 0.009 + 4 * se
    # the constant makes KL → 0 as α → ∞: it is −E log|z| = (γ + log 2)/2
    assert constant == pytest.approx((np.euler_gamma + np.log(2)) / 2, abs=0.009 + 4 * se)
    # and the approximation's limits: 0 at α → ∞, −½ log α + const at α → 0 (eq. 14's design)
    assert float(kl_log_uniform(30.0)) == pytest.approx(0.0, abs=1e-6)
    assert float(kl_log_uniform(-20.0) - kl_log_uniform(-22.0)) == pytest.approx(-1.0, abs=1e-3)


def test_kl_warmup_is_linear_from_zero():
    steps = np.arange(0, 25)
    np.testing.assert_allclose(np.asarray(kl_weight(steps, 10)), np.minimum(1.0, steps / 10), atol=1e-7)
    np.testing.assert_array_equal(np.asarray(kl_weight(steps, 0)), np.ones(()))


def _sparse_regression(n=200, d=100, noise=0.5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w = np.zeros(d)
    true = np.array([3, 17, 42, 60, 88])
    w[true] = [2.0, -1.5, 1.0, -2.5, 1.2]
    y = (x @ w + noise * rng.standard_normal(n)).astype(np.float32)
    return x, y, w, true


def test_sparse_linear_regression_keeps_the_signal_and_drops_the_noise():
    """5 true nonzero weights of 100, noise sd known. Per weight, with the others fixed, the
    objective in α (θ optimal for each α) is (t²/2)·α/(1+α) + KL(α), t the weight's conditional
    z-statistic x_jᵀr/(σ‖x_j‖) (r the residual without weight j); at large α its slope is
    (t² − 1)/(2α²), so the weight goes to α → ∞ when t² < 1 and stays when t² > 1 — the rule of
    automatic relevance determination (Tipping 2001). So every true weight (|t| > 20 here) is
    kept with θ near its value, and a zero weight is dropped unless its noise |t| exceeds about
    1: under the null t ∼ N(0, 1), about 68% of the 95 (≈ 65) go at convergence, not ≥ 90. The
    drift of log α is slow near t² = 1 (the slope vanishes like 1/α), so after 4000 epochs we
    ask for ≥ 50 dropped (59 seen), every zero weight with |t| > 1.5 kept (as the rule says)
    and ≥ 85% of those with |t| < 0.5 dropped (37 of 39 seen)."""
    x, y, w, true = _sparse_regression()
    model = bnnpp.models.mlp((), standardize=False, likelihood="gaussian", noise=0.5)
    post = bnnpp.fit(model, (x, y), method="vd", seed=0, progress=False, epochs=4000, num_samples=10)
    q = post.approximation
    assert isinstance(q, VariationalDropout)
    log_alpha, theta = q.log_alpha["dense_0.w"][:, 0], q.loc["dense_0.w"][:, 0]
    keep = log_alpha <= 3.0
    zeros = np.setdiff1d(np.arange(100), true)
    assert keep[true].all()
    np.testing.assert_allclose(theta[true], w[true], atol=0.15)  # OLS sd ≈ 0.5/√200·√2 = 0.05: 3 sd
    assert (~keep[zeros]).sum() >= 50
    # the conditional t of each zero weight at the fit (others at θ, dropped ones at 0)
    kept = np.where(keep, theta, 0.0)
    r = y - x @ kept - post.samples["dense_0.b"][0, 0, 0]
    t = np.abs([x[:, j] @ (r + x[:, j] * kept[j]) / (0.5 * np.linalg.norm(x[:, j])) for j in range(100)])[zeros]
    assert keep[zeros][t > 1.5].all()
    assert np.mean(~keep[zeros][t < 0.5]) >= 0.85
    # the draws: the dropped weights are exactly zero in every draw
    draws = post.samples["dense_0.w"][0, :, :, 0]
    assert np.all(draws[:, ~keep] == 0) and np.all(draws[:, keep] != 0)


@functools.cache
def _moons_fit(variant: str):
    """A 2-8-2 tanh classifier on moons under ``variant`` (shared by the tests below)."""
    moons = bnnpp.data.load_synthetic("moons", seed=0)
    net = bnnpp.models.mlp((8,), num_classes=2)
    return moons, bnnpp.fit(net, moons, method="vd", seed=1, progress=False, variant=variant, epochs=1500, kl_warmup_epochs=100, num_samples=30)


@pytest.mark.parametrize("variant", vd.VARIANTS)
def test_variants_keep_the_posterior_contract(variant, tmp_path):
    moons, post = _moons_fit(variant)
    traces = post.stats.traces  # full batch: one step per epoch, the KL weight rises over 100 steps
    np.testing.assert_allclose(traces["kl_weight"], np.minimum(1.0, np.arange(1500) / 100), atol=1e-6)
    np.testing.assert_allclose(traces["negative_elbo"], traces["nll"] + traces["kl"], rtol=1e-5)
    q = post.approximation
    assert isinstance(q, VariationalDropout) and set(q.loc) == {"dense_0.w", "dense_1.w"}
    assert post.samples["dense_0.w"].shape == (1, 30, 2, 8)
    la = np.concatenate([v.ravel() for v in q.log_alpha.values()])
    if variant == "gaussian_dropout":
        np.testing.assert_allclose(la, np.log(0.25), rtol=1e-6)  # the fixed α
    elif variant == "variational":
        assert np.all(la <= 0.0)  # α ≤ 1 (Kingma et al. 2015)
        assert len(np.unique(q.log_alpha["dense_0.w"])) == 1  # one α per layer
        assert set(post.stats.extras["alpha"]) == {"dense_0", "dense_1"}
    # the draws are N(θ, αθ²) per weight: check the spread of the kept weights
    w = post.samples["dense_0.w"][0]
    keep = q.keep()["dense_0.w"]
    sd = q.scale["dense_0.w"]
    z = (w - q.loc["dense_0.w"]) / np.where(keep, sd, 1.0)
    assert np.all(w[:, ~keep] == 0)
    assert abs(z[:, keep].std() - 1) < 0.2  # 30 draws × ≥ 1 weight: sd of the sd estimate ≤ 0.13
    assert metrics.accuracy(post.predict(moons.x_test).mean, moons.y_test) >= 0.85
    assert post.stats.extras["compression"] == pytest.approx(la.size / sum(post.stats.extras["nonzero_weights"].values()))
    idata = post.to_arviz()
    assert idata.posterior["dense_0.w"].dims == ("chain", "draw", "dense_0.in", "dense_0.out")
    assert {"posterior", "log_likelihood", "posterior_predictive"} <= set(group_names(idata))
    post.save(tmp_path / "p.nc")
    back = bnnpp.load(tmp_path / "p.nc")
    assert isinstance(back.approximation, VariationalDropout) and back.approximation.threshold == 3.0
    for site in q.loc:
        np.testing.assert_array_equal(back.approximation.log_alpha[site], q.log_alpha[site])
        np.testing.assert_array_equal(back.approximation.loc[site], q.loc[site])
    np.testing.assert_allclose(back.predict(moons.x_test[:9]).probs, post.predict(moons.x_test[:9]).probs, rtol=1e-6)


def test_log_alpha_table_counts_and_errors():
    """The table of the sparse fit: counts from the mask, the error at θ from a numpy forward pass."""
    moons, post = _moons_fit("sparse")
    q = post.approximation
    table = pruning.log_alpha_table(post, moons.x_test, moons.y_test, num_samples=10)
    keep = q.keep()
    assert [r["nonzero"] for r in table["layers"]] == [int(keep[s].sum()) for s in ("dense_0.w", "dense_1.w")]
    assert table["weights"] == 2 * 8 + 8 * 2 and table["compression"] == pytest.approx(32 / table["nonzero"])
    b0, b1 = post.samples["dense_0.b"][0, 0], post.samples["dense_1.b"][0, 0]
    w0, w1 = (np.where(keep[s], q.loc[s], 0.0) for s in ("dense_0.w", "dense_1.w"))
    logits = np.tanh(moons.x_test @ w0 + b0) @ w1 + b1
    assert table["test_error"] == pytest.approx(float(np.mean(logits.argmax(-1) != moons.y_test)), abs=1e-12)
    assert 0 <= table["test_error_draws"] <= 1
    md = pruning.log_alpha_markdown(table)
    assert "| **total** | 32 |" in md and "compression" in md
    with pytest.raises(TypeError, match="method='vd'"):
        pruning.log_alpha_table(dataclasses.replace(post, approximation=None), moons.x_test, moons.y_test)


def test_bad_options_and_models_fail_before_compiling(compile_counter):
    moons = bnnpp.data.load_synthetic("moons", seed=0)
    net = bnnpp.models.mlp((4,), num_classes=2)
    before = compile_counter()
    for options, match in (
        ({"variant": "bernoulli"}, "variant must be one of"),
        ({"variant": "variational", "alpha": 2.0}, "alpha <= 1"),
        ({"alpha": -1.0}, "alpha"),
        ({"kl_warmup_epochs": -1}, "kl_warmup_epochs must be an integer >= 0"),
        ({"threshold": float("nan")}, "threshold must be a finite number"),
        ({"batch_size": 10_000}, "batch_size"),
    ):
        with pytest.raises(ValueError, match=match):
            bnnpp.fit(net, moons, method="vd", progress=False, **options)

    def plain(x, y=None):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=x @ w), obs=y)

    with pytest.raises(ValueError, match="found none"):
        bnnpp.fit(plain, moons, method="vd", progress=False)
    assert compile_counter() == before


@pytest.mark.slow  # ~60 s on the shared 2 cores: a 3-epoch MNIST fit, then the pruning tables on 10,000 test images
def test_prune_cli_on_a_vd_run(tmp_path, capsys, monkeypatch):
    if not (DATA_DIR / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST IDX files not found in {DATA_DIR / 'mnist'} (set BNNPP_DATA_DIR)")
    monkeypatch.setenv("BNNPP_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "run"
    code = main(["fit", "--data", "mnist", "--data-dir", str(DATA_DIR), "--model", "mlp", "--hidden", "50",
                 "--activation", "relu", "--method", "vd", "--epochs", "3", "--batch-size", "100", "--learning-rate", "0.003",
                 "--kl-warmup-epochs", "1", "--train-subset", "2000", "--validation", "0", "--num-samples", "10",
                 "--out", str(out), "--quiet"])
    assert code == 0
    capsys.readouterr()
    assert main(["prune", str(out), "--fractions", "0,50"]) == 0
    printed = capsys.readouterr().out
    rep = json.loads((out / "prune.json").read_text())
    table = rep["log_alpha"]
    post = bnnpp.load(out / "posterior.nc")
    keep = post.approximation.keep()
    assert [(r["site"], r["nonzero"]) for r in table["layers"]] == [(s, int(m.sum())) for s, m in keep.items()]
    assert table["weights"] == 784 * 50 + 50 * 10
    assert table["compression"] == pytest.approx(table["weights"] / table["nonzero"]) and table["compression"] > 1
    assert table["test_error"] < 0.2  # 3 epochs on 2,000 images: far above chance (0.9 error)
    assert f"**{table['compression']:.1f}×**" in printed and "test error at θ" in printed
    assert "log alpha rule" in (out / "prune.md").read_text()
