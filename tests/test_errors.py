"""Bad input: one-line ValueError/TypeError naming the fix, raised before anything compiles."""

from __future__ import annotations

import numpy as np
import optax
import pytest

import bnnpp
from bnnpp import models, priors

X = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32)
MODEL = models.mlp((3,), num_classes=2)


def _with(x=X, y=Y):
    return np.array(x, copy=True), np.array(y, copy=True)


def _nan_x():
    x, y = _with()
    x[3, 1] = np.nan
    return x, y


def _inf_y():
    x, y = _with(y=Y.astype(np.float32))
    y[0] = np.inf
    return x, y


CASES = {
    "nan in x": (dict(data=_nan_x()), ValueError, "NaN or inf"),
    "inf in y": (dict(data=_inf_y()), ValueError, "NaN or inf"),
    "length mismatch": (dict(data=(X, Y[:-1])), ValueError, "one target per row"),
    "label too large": (dict(data=(X, Y + 1)), ValueError, r"labels must lie in \[0, 2\)"),
    "negative label": (dict(data=(X, Y - 1)), ValueError, "labels must lie"),
    "fractional label": (dict(data=(X, Y + 0.5)), ValueError, "integers"),
    "x rank 1": (dict(data=(X[:, 0], Y)), ValueError, "reshape"),
    "x rank 3": (dict(data=(X[:, :, None], Y)), ValueError, "rank 2"),
    "empty": (dict(data=(X[:0], Y[:0])), ValueError, "empty"),
    "not a pair": (dict(data=X), TypeError, r"\(x, y\)"),
    "unknown method": (dict(method="hmc9"), ValueError, "registered methods: advi"),
    "unknown option": (dict(num_stepz=10), ValueError, "does not take option"),
    "zero learning rate": (dict(learning_rate=0.0), ValueError, "learning_rate must be a positive"),
    "negative steps": (dict(num_steps=-5), ValueError, "num_steps must be an integer"),
    "float steps": (dict(num_steps=10.5), ValueError, "num_steps"),
    "bad guide": (dict(guide="diagonal"), ValueError, "guide must be one of"),
    "bad optimizer": (dict(optimizer="adam"), TypeError, "optax"),
    "negative seed": (dict(seed=-1), ValueError, "seed"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fit_rejects_bad_input_before_compiling(case, compile_counter):
    kwargs, exc, match = CASES[case]
    data = kwargs.pop("data", (X, Y))
    before = compile_counter()
    with pytest.raises(exc, match=match) as info:
        bnnpp.fit(MODEL, data, progress=False, **kwargs)
    assert "\n" not in str(info.value)
    assert compile_counter() == before


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: priors.normal(0.0), "positive"),
        (lambda: priors.laplace(-1.0), "positive"),
        (lambda: priors.half_cauchy(0.0), "positive"),
        (lambda: priors.inverse_gamma(1.0, -2.0), "positive"),
        (lambda: priors.prior("gaussian"), "choose one of normal"),
        (lambda: priors.hyperprior("gamma"), "choose one of half-normal"),
        (lambda: priors.normal(1.0, per="neuron"), "per must be one of"),
    ],
)
def test_prior_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_optimizer_and_learning_rate_together_is_an_error(compile_counter):
    before = compile_counter()
    with pytest.raises(ValueError, match="either optimizer or learning_rate"):
        bnnpp.fit(MODEL, (X, Y), progress=False, optimizer=optax.sgd(1e-3), learning_rate=1e-2)
    assert compile_counter() == before
