"""bnnpp.sweep: the prior grid, and the vmapped group fits against one-by-one fits."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp import sweep as sw


def test_grid_expands_fixed_scales_and_skips_flat_hyperpriors():
    cells = sw.grid(("normal", "flat"), ("fixed", "half-cauchy"), fixed_scales=(0.3, 3.0))
    assert [c.label for c in cells] == ["normal/fixed(0.3)", "normal/fixed(3)", "normal/half-cauchy", "flat/fixed"]
    assert cells[2].prior.hierarchical and cells[3].prior.kind == "flat"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"weight_priors": ()}, "grid is empty"),
        ({"weight_priors": ("flat",), "hyperpriors": ("inverse-gamma",)}, "grid is empty"),
        ({"weight_priors": ("gaussian",)}, "unknown weight prior"),
        ({"hyperpriors": ("gamma",)}, "unknown hyperprior"),
        ({"fixed_scales": (0.0,)}, "positive"),
    ],
)
def test_grid_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sw.grid(**kwargs)


def test_sweep_rejects_empty_grid():
    d = bnnpp.data.moons(n=40)
    with pytest.raises(ValueError, match="grid is empty"):
        sw.sweep([d], [])


def _compare(method, options, configs):
    d = bnnpp.data.moons(n=120)
    together = sw.sweep([d], configs, method=method, seeds=(0, 3), progress=False, **options)
    alone = sw.sweep([d], configs, method=method, seeds=(0, 3), progress=False, vmap=False, **options)
    assert together["compiled_groups"] == len({sw._structure(c.prior) for c in configs})
    a = {(r["label"], r["seed"]): r for r in together["runs"]}
    b = {(r["label"], r["seed"]): r for r in alone["runs"]}
    assert a.keys() == b.keys() and len(a) == 2 * len(configs)
    for k in a:
        # the same computation, batched: equal up to float32 re-association
        assert a[k]["accuracy"] == b[k]["accuracy"]
        assert a[k]["nll"] == pytest.approx(b[k]["nll"], abs=1e-5)
    # the grid's numbers matter: different scales give different fits
    assert len({round(r["nll"], 6) for r in together["runs"]}) > len(configs)


def test_vmapped_sweep_equals_one_by_one_map():
    configs = sw.grid(("normal",), ("fixed", "inverse-gamma"), fixed_scales=(0.5, 2.0))
    _compare("map", {"num_steps": 40}, configs)


@pytest.mark.parametrize(
    "method, options",
    [
        pytest.param("bbb", {"epochs": 40, "num_samples": 20}, marks=pytest.mark.slow),  # ~60 s; map's stays fast
        # sgld: the equality of batched and one-by-one fits is checked fast for map above; sgld inside the
        # vmapped sweep is tests/test_contract.py::test_every_method_sweeps_vmapped[sgld], fast
        pytest.param("sgld", {"num_chains": 2, "burn_in": 20, "num_samples": 10, "thinning": 2}, marks=pytest.mark.slow),
    ],
)
def test_vmapped_sweep_equals_one_by_one_for_every_runner_method(method, options):
    # every method the runner drives shares the contract, so the sweep vmaps it
    configs = sw.grid(("normal",), ("fixed",), fixed_scales=(0.5, 2.0))
    _compare(method, options, configs)


def _cliff_classifier(prior):
    """Logits (0, w·x₀) on moons, whose labels pull w to about 1.5; the log joint turns NaN once w > 1."""

    def model(x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 10.0))
        numpyro.factor("cliff", jnp.where(w > 1.0, jnp.nan, 0.0))
        logits = jnp.stack([jnp.zeros(x.shape[0]), w * x[:, 0]], -1)
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Categorical(logits=logits), obs=y)

    return model


def test_vmapped_sweep_stops_a_diverging_fit_as_one_by_one_does():
    """A grid point whose loss turns NaN: the vmapped sweep keeps the state before it, as
    bnnpp.fit does in the vmap=False path, instead of NaN scores; each run says where it stopped."""
    d = bnnpp.data.moons(n=120)
    configs = sw.grid(("normal",), ("fixed",), fixed_scales=(1.0,))
    options = {"num_steps": 400, "learning_rate": 0.05, "init_radius": 0.1}
    with pytest.warns(RuntimeWarning, match="1 of 1 sweep fits met a NaN/inf loss"):
        together = sw.sweep([d], configs, method="map", seeds=(0,), progress=False, model_fn=_cliff_classifier, **options)
    with pytest.warns(RuntimeWarning, match="NaN/inf at step"):
        alone = sw.sweep([d], configs, method="map", seeds=(0,), progress=False, vmap=False, model_fn=_cliff_classifier, **options)
    (a,), (b,) = together["runs"], alone["runs"]
    assert a["stopped_at"] is not None and a["stopped_at"] == b["stopped_at"] > 0
    assert np.isfinite(a["nll"]) and a["accuracy"] == b["accuracy"]
    assert a["nll"] == pytest.approx(b["nll"], abs=1e-5)


@pytest.mark.slow
def test_vmapped_sweep_equals_one_by_one_advi():
    configs = sw.grid(("laplace", "flat"), ("fixed", "half-normal"), fixed_scales=(0.5, 2.0))
    _compare("advi", {"num_steps": 40, "num_samples": 20}, configs)


def test_summarise_picks_best_fixed_scale():
    runs = [
        {"data": "m", "weight_prior": "normal", "hyperprior": "fixed", "scale": s, "seed": k, "accuracy": a, "nll": 0.3}
        for s, accs in ((0.3, (0.80, 0.82)), (3.0, (0.85, 0.87)))
        for k, a in enumerate(accs)
    ]
    (row,) = sw.summarise(runs)
    assert row["scale"] == 3.0 and row["accuracy_mean"] == pytest.approx(0.86) and row["seeds"] == 2
    assert row["accuracy_sd"] == pytest.approx(0.01414, abs=1e-4)
