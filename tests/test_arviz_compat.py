"""One conversion layer for ArviZ 0.x (InferenceData) and 1.x (DataTree): bnnpp's files load
whichever ArviZ wrote them, and its PSIS-LOO answers as ArviZ 0.x does. CI runs this file under
both generations (.ci/run)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import bnnpp
from bnnpp.posterior import arviz_compat

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("writer", ["arviz0", "arviz1"])
def test_a_file_written_by_either_arviz_loads(writer):
    """``post.to_arviz().to_netcdf(path)`` by ArviZ 0.23 (InferenceData) and by ArviZ 1.3
    (DataTree) of the same small advi fit (tests/data, made with tiny settings); the draws
    are compared with the array saved beside each file."""
    path = DATA / f"{writer}_advi.nc"
    post = bnnpp.load(path)
    np.testing.assert_array_equal(post.samples["dense_0.w"], np.load(f"{path}.w.npy"))
    assert post.method == "advi" and post.x.shape == (17, 2)  # moons(n=24): 17 training rows
    pred = post.predict(post.x[:3])
    assert pred.probs.shape == (8, 3, 2)


def test_save_writes_what_the_installed_arviz_reads(tmp_path):
    import arviz as az

    post = bnnpp.load(DATA / "arviz1_advi.nc")
    path = tmp_path / "p.nc"
    post.save(path)
    data = az.from_netcdf(path)  # InferenceData (0.x) or DataTree (1.x)
    assert {"posterior", "log_likelihood", "observed_data", "constant_data"} <= set(arviz_compat.group_names(data))
    np.testing.assert_array_equal(data["posterior"]["dense_0.w"].values, post.samples["dense_0.w"])
    expected = "DataTree" if arviz_compat.arviz_major() >= 1 else "InferenceData"
    assert type(post.to_arviz()).__name__ == expected


def test_unsmoothed_loo_is_importance_sampling_with_raw_weights():
    """Few draws: elpd_i = −log mean_s 1/p(y_i | θ_s), computed here directly; under ArviZ
    0.x also ``az.loo`` itself, which leaves such weights unsmoothed (k̂ = inf)."""
    rng = np.random.default_rng(0)
    ll = rng.normal(-1.0, 0.5, size=(5, 30))
    res = arviz_compat._unsmoothed_loo(ll)
    elpd_i = -np.log(np.mean(np.exp(-ll), axis=0))
    lpd_i = np.log(np.mean(np.exp(ll), axis=0))
    np.testing.assert_allclose(res.elpd, elpd_i.sum(), rtol=1e-12)
    np.testing.assert_allclose(res.p_loo, (lpd_i - elpd_i).sum(), rtol=1e-12)
    np.testing.assert_allclose(res.se, np.sqrt(30 * np.var(elpd_i)), rtol=1e-12)
    assert np.all(np.isinf(res.pareto_k)) and res.warning
    if arviz_compat.arviz_major() == 0:
        import arviz as az

        idata = az.from_dict(posterior={"a": rng.normal(size=(1, 5))}, log_likelihood={"y": ll[None]})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = az.loo(idata, pointwise=True)
        np.testing.assert_allclose([res.elpd, res.se, res.p_loo], [ref.elpd_loo, ref.se, ref.p_loo], rtol=1e-10)


def test_names_with_a_slash_survive_either_container():
    import xarray as xr

    groups = {"posterior": xr.Dataset({"Dense_0/kernel": (("chain", "draw"), np.zeros((1, 2)))})}
    data = arviz_compat.build(groups)
    back = arviz_compat.renamed(arviz_compat.groups(data), arviz_compat.decode_name)
    assert list(back["posterior"].data_vars) == ["Dense_0/kernel"]
