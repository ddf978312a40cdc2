"""Every method's ``to_arviz()`` works with ArviZ's ``loo``, ``compare`` and ``plot_ppc``
(ArviZ 0.x; ``plot_ppc_dist`` under 1.x), or
bnnpp refuses in one line (a one-draw fit has no log-likelihood group, and
``diagnostics.loo``/``compare`` say why); bnnpp's own ArviZ calls log no "Shape validation
failed" warning."""

from __future__ import annotations

import logging
import warnings

import arviz as az
import matplotlib
import numpy as np
import pytest
from small_options import SMALL_OPTIONS

import bnnpp
from bnnpp import diagnostics
from bnnpp.posterior.arviz_compat import arviz_major, group_names

ARVIZ_1 = arviz_major() >= 1

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the backend

_FITS: dict = {}


def _fit(method: str):
    """A small moons fit per method, shared by the tests of this file."""
    if method not in _FITS:
        data = bnnpp.data.moons(n=120, seed=1)
        model = bnnpp.models.mlp((4,), num_classes=2)
        _FITS[method] = bnnpp.fit(model, data, method=method, seed=0, progress=False, **SMALL_OPTIONS.get(method, {}))
    return _FITS[method]


def _bnnpp_calls_are_quiet(post, caplog):
    """to_arviz, summary and (with draws) loo, with ArviZ's warnings recorded: none may be
    about shapes (its shape validation, or its guess that chains and draws were swapped)."""
    caplog.set_level(logging.WARNING, logger="arviz")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = post.to_arviz()
        diagnostics.summary(post)
        if post.num_chains * post.num_draws > 1:
            diagnostics.loo(post)
    said = [r.getMessage() for r in caplog.records] + [str(w.message) for w in caught]
    assert not [m for m in said if "Shape validation failed" in m or "More chains" in m]
    return idata


def _check_arviz(method: str, caplog):
    post = _fit(method)
    idata = _bnnpp_calls_are_quiet(post, caplog)
    if ARVIZ_1:
        az.plot_ppc_dist(idata, num_samples=min(5, post.num_chains * post.num_draws), backend="matplotlib")
        plt.close("all")
    else:
        ax = az.plot_ppc(idata, num_pp_samples=min(5, post.num_chains * post.num_draws), random_seed=0)
        plt.close(np.ravel(ax)[0].figure)
    if post.num_chains * post.num_draws < 2:
        assert "log_likelihood" not in group_names(idata) and "bnnpp_no_log_likelihood" in idata["posterior"].attrs
        with pytest.raises(ValueError, match="needs several posterior draws") as err:
            diagnostics.loo(post)
        assert "\n" not in str(err.value)
        with pytest.raises(ValueError, match=f"compare: {method} has no log-likelihood draws"):
            diagnostics.compare({method: post, "advi": _fit("advi")})
        with pytest.raises((TypeError, KeyError, ValueError)):  # ArviZ's own refusal
            az.loo(idata)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ's high-Pareto-k warnings: the k̂ are in the result
        loo = az.loo(idata)
        elpd = loo.elpd if ARVIZ_1 else loo.elpd_loo  # ArviZ 1.x renamed elpd_loo
        assert np.isfinite(elpd) and np.isfinite(loo.se)
        table = az.compare({method: idata, "other": _fit("advi" if method != "advi" else "bbb").to_arviz()})
    assert set(table.index) == {method, "other"} and np.all(np.isfinite(table["elpd" if ARVIZ_1 else "elpd_loo"]))
    mine = diagnostics.loo(post)
    np.testing.assert_allclose(mine.elpd, elpd, rtol=1e-6)
    columns = set(diagnostics.compare({method: post, "other": _fit("advi" if method != "advi" else "bbb")}).columns)
    assert {"rank", "elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse", "warning"} <= columns  # under ArviZ 0.x and 1.x


@pytest.mark.parametrize("method", ["map", "advi"])
def test_a_point_estimate_and_a_posterior_with_arviz(method, caplog):
    _check_arviz(method, caplog)


@pytest.mark.slow  # a fit per method: about 60 s on 2 cores
@pytest.mark.parametrize("method", [m for m in bnnpp.registered() if m not in ("map", "advi")])
def test_every_method_with_arviz(method, caplog):
    _check_arviz(method, caplog)


def test_loo_is_an_object_with_a_short_repr(caplog):
    loo = diagnostics.loo(_fit("advi"))
    assert isinstance(loo, diagnostics.Loo) and loo.n == 84 and loo.pareto_k.shape == (84,)
    k = loo.khat
    assert k.good + k.ok + k.bad + k.very_bad == 84 and k.max == pytest.approx(np.max(loo.pareto_k))
    text = repr(loo)
    assert "\n" not in text and len(text) < 200 and f"{loo.elpd:.2f}" in text
    assert loo["elpd"] == loo.elpd and loo["share_khat_above_0.7"] == pytest.approx(np.mean(loo.pareto_k > 0.7))
    assert set(dict(loo)) >= {"elpd", "se", "p_loo", "n", "pareto_k", "max_khat", "share_khat_above_0.7"}
    with pytest.raises(KeyError):
        loo["elpd_loo"]
    check = diagnostics.elbo_convergence(_fit("advi"))
    assert check["converged"] is check.converged and "ElboConvergence(" in repr(check)


def test_loo_of_an_ensemble_warns_that_its_draws_are_too_few():
    """An ensemble's few members (one draw each) give k̂ = inf everywhere: loo still returns its
    numbers but says, in one warning, that they are unreliable and why."""
    post = _fit("ensemble")
    assert post.num_chains * post.num_draws < diagnostics.LOO_MIN_DRAWS
    with pytest.warns(UserWarning, match=r"Pareto k̂ > 0.7 for \d+ of 84 observations.*too few for Pareto smoothing"):
        loo = diagnostics.loo(post)
    assert loo.khat.very_bad + loo.khat.bad > 0
