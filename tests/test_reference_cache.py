"""The cached reference posterior (``bnnpp.references``): a second comparison loads the long
run instead of refitting it, bit for bit; the key changes with everything that decides the
draws; a damaged entry is refitted; the CLI's flags."""

from __future__ import annotations

import json

import numpy as np
import pytest

import bnnpp
from bnnpp.cli import main
from bnnpp.compare import compare_methods
from bnnpp.references import cache_folder, reference_key, reference_posterior

SMALL = {"num_chains": 2, "num_warmup": 30, "num_samples": 20}


@pytest.fixture(scope="module")
def problem():
    data = bnnpp.data.moons(n=80, seed=3)
    model = bnnpp.models.mlp((3,), activation="tanh", num_classes=2, prior=bnnpp.priors.normal(1.0))
    return model, data


def test_the_key_follows_what_decides_the_draws(problem):
    model, data = problem
    key = reference_key(model, data, "nuts", SMALL, 0)
    assert len(key) == 64 and key == reference_key(model, data, "nuts", dict(reversed(SMALL.items())), 0)
    other_model = bnnpp.models.mlp((4,), activation="tanh", num_classes=2, prior=bnnpp.priors.normal(1.0))
    other_data = bnnpp.data.moons(n=80, seed=4)
    assert len({
        key,
        reference_key(model, data, "nuts", SMALL, 1),
        reference_key(model, data, "nuts", {**SMALL, "num_samples": 21}, 0),
        reference_key(model, data, "mclmc", SMALL, 0),
        reference_key(other_model, data, "nuts", SMALL, 0),
        reference_key(model, other_data, "nuts", SMALL, 0),
    }) == 6
    assert reference_key(lambda x, y=None: None, data, "nuts", SMALL, 0) is None  # a bare NumPyro function: not cached

    class NoSpec:
        def spec(self):
            raise NotImplementedError

    assert reference_key(NoSpec(), data, "nuts", SMALL, 0) is None  # a spec that cannot be written: not cached


@pytest.fixture(scope="module")
def cached(problem, tmp_path_factory):
    """One reference fit, written to a module-wide cache folder: ``(folder, posterior, info)``."""
    model, data = problem
    folder = tmp_path_factory.mktemp("refs")
    post, info = reference_posterior(model, data, "nuts", SMALL, seed=0, cache=folder, progress=False)
    return folder, post, info


def test_a_second_call_loads_the_reference_bit_for_bit(problem, cached):
    model, data = problem
    folder, first, info = cached
    assert not info["from_cache"] and info["cache_file"].startswith(str(folder))
    assert [p.name for p in folder.iterdir()] == [info["cache_file"].split("/")[-1]]  # no temporary file left
    again, info2 = reference_posterior(model, data, "nuts", SMALL, seed=0, cache=folder, progress=False)
    assert info2["from_cache"] and info2["cache_file"] == info["cache_file"]
    for name, v in first.samples.items():
        np.testing.assert_array_equal(np.asarray(again.samples[name]), np.asarray(v))
    # the draws are bit for bit (above); the predictions of the two programs agree to float32 rounding (jax 0.12.1
    # compiles the fitted and the reloaded posterior's observation function with a 1-ulp difference in one of 48 rows)
    np.testing.assert_allclose(np.asarray(again.predict(data.x_test).mean), np.asarray(first.predict(data.x_test).mean), rtol=1e-6)


def test_a_damaged_entry_is_refitted(problem, cached, tmp_path):
    model, data = problem
    _, first, info = cached
    damaged = tmp_path / info["cache_file"].split("/")[-1]
    damaged.write_bytes(b"not a netCDF file")
    with pytest.warns(RuntimeWarning, match="could not be read"):
        post, again = reference_posterior(model, data, "nuts", SMALL, seed=0, cache=tmp_path, progress=False)
    assert not again["from_cache"] and again["cache_file"] == str(damaged)
    np.testing.assert_array_equal(np.asarray(post.samples["dense_0.w"]), np.asarray(first.samples["dense_0.w"]))
    assert reference_posterior(model, data, "nuts", SMALL, seed=0, cache=tmp_path, progress=False)[1]["from_cache"]


def test_the_default_folder_is_under_bnnpp_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("BNNPP_CACHE_DIR", str(tmp_path))
    assert cache_folder() == tmp_path / "references"
    assert cache_folder(tmp_path / "x") == tmp_path / "x"


def test_compare_uses_the_cached_reference(problem, cached):
    model, data = problem
    folder, first, info = cached
    res, posts = compare_methods(
        model, data, ["map"], seed=0, quick=True, progress=False, reference="nuts", reference_options=SMALL, reference_cache=folder
    )
    assert res["reference"]["from_cache"] and res["reference"]["cache_file"] == info["cache_file"]
    direct = bnnpp.diagnostics.reference(posts["map"], first, data.x_test)
    assert res["methods"]["map"]["ref_agreement"] == direct["agreement"]


@pytest.mark.slow
def test_cli_caches_in_the_folder_given(tmp_path, capsys):
    cache = tmp_path / "refs"
    argv = ["compare", "--data", "moons", "--methods", "map", "--quick", "--quiet", "--reference", "nuts", "--reference-cache", str(cache)]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "compare.json").read_text())["reference"]
    b = json.loads((tmp_path / "b" / "compare.json").read_text())["reference"]
    assert not a["from_cache"] and b["from_cache"] and len(list(cache.iterdir())) == 1
    assert "loaded from the cache" in (tmp_path / "b" / "compare.md").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reference-cache", "x"], "need --reference"),
        (["--no-reference-cache"], "need --reference"),
        (["--reference", "nuts", "--reference-cache", "x", "--no-reference-cache"], "not both"),
    ],
)
def test_cli_cache_flags_are_checked_before_any_fit(tmp_path, capsys, argv, message):
    out = tmp_path / "cmp"
    assert main(["compare", "--data", "moons", "--methods", "map", "--quick", "--out", str(out), *argv]) != 0
    assert message in capsys.readouterr().err and not out.exists()
