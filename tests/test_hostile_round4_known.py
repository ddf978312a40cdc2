"""Hostile inputs found in the fourth round: symbolic links as outputs, start values that are
complex or beyond float32, site names a posterior cannot store, a NaN at the first step, and
an optimiser that diverges or does not move. Each is a one-line error naming the fix before
anything compiles, or works; nothing is lost or half-written."""

from __future__ import annotations

import os

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp import files
from bnnpp.cli import main
from bnnpp.inference.health import DIVERGED_RISE, FitHealthWarning, optimiser_stuck

X = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
Y = (2.0 * X[:, 0] + 0.1).astype(np.float32)


def regression(x, y=None):
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    m = numpyro.sample("m", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(m * x[:, 0], s), obs=y)


def named(latent: str, observed: str):
    def model(x, y=None):
        m = numpyro.sample(latent, dist.Normal(0.0, 1.0))
        numpyro.sample(observed, dist.Normal(m, 1.0).expand([x.shape[0]]), obs=y)

    return model


def _one_line(capsys, match: str) -> str:
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err and "Traceback" not in err, err
    return err


# -- outputs through symbolic links ----------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``(run folder, new-rows CSV)`` of a 30-step map fit to a 40-row CSV."""
    folder = tmp_path_factory.mktemp("links")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    with open(folder / "train.csv", "w") as f:
        f.write("a,b,y\n" + "".join(f"{a},{b},{a - b}\n" for a, b in x))
    with open(folder / "new.csv", "w") as f:
        f.write("a,b\n" + "".join(f"{a},{b}\n" for a, b in x[:4]))
    argv = ["fit", "--data", str(folder / "train.csv"), "--target", "y", "--method", "map", "--hidden", "3", "--num-steps", "30"]
    assert main([*argv, "--quiet", "--out", str(folder / "run")]) == 0
    return str(folder / "run"), str(folder / "new.csv")


def test_predict_out_through_a_link_replaces_the_target_and_keeps_the_link(run, tmp_path, capsys):
    run_dir, new_csv = run
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "target.csv"
    target.write_text("old\n")
    link = tmp_path / "plink.csv"
    os.symlink(target, link)
    assert main(["predict", run_dir, "--data", new_csv, "--out", str(link)]) == 0
    assert os.path.islink(link) and os.path.realpath(link) == os.path.realpath(target)
    assert target.read_text().splitlines()[0].startswith("mean") and len(target.read_text().splitlines()) == 5
    assert [f for f in os.listdir(tmp_path / "elsewhere") if f.startswith(".")] == []


def test_predict_out_onto_a_dangling_link_is_one_line_and_touches_nothing(run, tmp_path, capsys):
    run_dir, new_csv = run
    link = tmp_path / "dangling.csv"
    os.symlink(tmp_path / "missing" / "t.csv", link)
    assert main(["predict", run_dir, "--data", new_csv, "--out", str(link)]) == 2
    _one_line(capsys, "symbolic link")
    assert os.path.islink(link) and not os.path.exists(tmp_path / "missing")


def test_a_posterior_saved_through_a_link_writes_its_target(tmp_path):
    post = bnnpp.fit(regression, (X, Y), method="map", num_steps=20, progress=False)
    target = tmp_path / "real.nc"
    target.write_bytes(b"old")
    os.symlink(target, tmp_path / "link.nc")
    post.save(tmp_path / "link.nc")
    assert os.path.islink(tmp_path / "link.nc")
    np.testing.assert_array_equal(bnnpp.load(target, model=regression).samples["m"], post.samples["m"])
    with pytest.raises(ValueError, match="symbolic link to .*does not exist"):
        os.symlink(tmp_path / "nowhere.nc", tmp_path / "dangling.nc")
        post.save(tmp_path / "dangling.nc")
    assert not os.path.exists(tmp_path / "nowhere.nc")


def test_real_file_follows_chains_and_refuses_loops_and_folders(tmp_path):
    (tmp_path / "t.csv").write_text("x")
    os.symlink(tmp_path / "t.csv", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    assert files.real_file(tmp_path / "b") == os.path.realpath(tmp_path / "t.csv")
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    with pytest.raises(ValueError, match="symbolic link"):
        files.real_file(tmp_path / "loop1")
    os.symlink(tmp_path, tmp_path / "dirlink")
    with pytest.raises(ValueError, match="links to the folder"):
        files.real_file(tmp_path / "dirlink")


# -- start values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("init", "error", "match"),
    [
        ({"m": np.complex64(1 + 1j)}, TypeError, "is complex"),
        ({"m": np.array(1e300)}, ValueError, "beyond float32's range"),
        ({"s": 1e300}, ValueError, "beyond float32's range"),
        ({"s": -1.0}, ValueError, "outside the site's support"),
        ({"m": np.nan}, ValueError, "non-finite"),
    ],
)
def test_start_values_must_be_real_finite_float32_and_in_the_support(init, error, match):
    with pytest.raises(error, match=match) as e:
        bnnpp.fit(regression, (X, Y), method="map", num_steps=10, progress=False, init=init)
    assert "\n" not in str(e.value)


# -- site names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latent", "observed", "bad"), [("", "y", "''"), ("m", "chain", "'chain'"), ("m", "draw", "'draw'"), ("m", "", "''")]
)
def test_site_names_a_posterior_cannot_store_are_refused_before_compiling(latent, observed, bad, compile_counter):
    before = compile_counter()
    with pytest.raises(ValueError, match=f"site named {bad}") as e:
        bnnpp.fit(named(latent, observed), (X, Y), method="map", num_steps=10, progress=False)
    assert "\n" not in str(e.value) and compile_counter() == before


# -- a NaN at the first step; an optimiser that diverges or stands still ---------------------


def test_a_nan_at_the_first_step_is_an_error_not_a_fit_of_step_minus_one():
    def broken(x, y=None):
        m = numpyro.sample("m", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(m * x[:, 0] + jnp_nan(), 1.0), obs=y)

    with pytest.raises(ValueError, match="first step, from the start values: nothing was fitted") as e:
        bnnpp.fit(broken, (X, Y), method="map", num_steps=10, progress=False)
    assert "step -1" not in str(e.value) and "\n" not in str(e.value)


def jnp_nan():
    import jax.numpy as jnp

    return jnp.nan


def test_optimiser_stuck_on_traces():
    rng = np.random.default_rng(0)
    falling = 100.0 * np.exp(-np.arange(500) / 50.0) + 10.0 + 0.01 * rng.normal(size=500)
    assert optimiser_stuck(falling) is None
    assert optimiser_stuck(np.r_[falling[:250], np.full(250, falling[250])]) is None  # converged and flat: fine
    rose = np.r_[1000.0, np.full(499, 1000.0 * (DIVERGED_RISE + 2))]
    assert optimiser_stuck(rose)["kind"] == "rose"
    assert optimiser_stuck(np.full(500, -3.5))["kind"] == "still"
    noisy = 5.0 + rng.normal(size=500)  # a stochastic ELBO at its optimum moves every step
    assert optimiser_stuck(noisy) is None
    assert optimiser_stuck(np.full(50, 1.0)) is None  # too short to judge


@pytest.mark.parametrize(("learning_rate", "match"), [(1e6, "optimiser diverged"), (1e-12, "did not move")])
def test_a_map_fit_with_an_absurd_learning_rate_says_so(moons, learning_rate, match):
    model = bnnpp.models.mlp(hidden=(8,), likelihood="categorical", num_classes=2)
    with pytest.warns(FitHealthWarning, match=match):
        bnnpp.fit(model, moons, method="map", num_steps=200, learning_rate=learning_rate, progress=False)


def test_a_latent_site_named_chain_is_stored_and_reloaded(tmp_path):
    post = bnnpp.fit(named("chain", "y"), (X, Y), method="map", num_steps=10, progress=False)
    post.save(tmp_path / "p.nc")
    np.testing.assert_array_equal(bnnpp.load(tmp_path / "p.nc", model=named("chain", "y")).samples["chain"], post.samples["chain"])
