"""The evidence-trained MAP that advi and bbb start from under a hierarchical prior never hands
them NaN: its first non-finite step restarts it from map's own default start, a second stops it
at the state before (``bnnpp.inference.map_estimate.map_start``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from shared_data import DATA_DIR

import bnnpp
from bnnpp import priors

HAVE_UCI = (DATA_DIR / "uci" / "energy" / "data.txt").is_file()


@pytest.mark.skipif(not HAVE_UCI, reason=f"UCI sets not found under {DATA_DIR}/uci (set BNNPP_DATA_DIR)")
def test_advi_on_uci_energy_with_a_heteroscedastic_hierarchical_net_is_finite():
    """UCI energy, split 0 less its 20% validation part, one hidden layer of 50 ReLU units,
    heteroscedastic noise, per-layer HalfNormal(1) scales: the uniform U(±2) start of advi's
    evidence MAP overflowed (the log-scale output) and every draw was NaN, so the fit ended in
    ValueError from its own collapse check. Now it restarts from Glorot-scale layers: finite
    draws, and scales near those of map's own evidence fit (0.39, 0.63 measured)."""
    from bnnpp.data.uci_sets import uci

    d = uci("energy", 0, DATA_DIR, validation=0.2, seed=0)
    model = bnnpp.models.mlp((50,), activation="relu", likelihood="heteroscedastic", prior=priors.normal(priors.half_normal(1.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bnnpp.fit(model, (d.x_train, d.y_train), method="advi", num_steps=300, seed=0, progress=False)
    assert all(np.isfinite(v).all() for v in post.samples.values())
    scales = [float(np.median(post.samples[f"dense_{i}.scale"])) for i in range(2)]
    assert 0.1 < scales[0] < 1.0 and 0.1 < scales[1] < 1.5, scales
    assert np.isfinite(post.predict(d.x_val).scores(d.y_val)["nll"])


@pytest.mark.skipif(not HAVE_UCI, reason=f"UCI sets not found under {DATA_DIR}/uci (set BNNPP_DATA_DIR)")
def test_the_evidence_start_fits_uci_energy_from_every_seed():
    """UCI energy split 5 (its whole training split, standardised targets), the heteroscedastic
    hierarchical net above: from the former U(±2) start the evidence MAP stalled at a train RMSE
    of 4-23 target sds for seeds 1, 2, 3, 5 and 6 of 0-7 (advi's fit from seed 5 then explained the
    targets as noise and scored test RMSE 0.65 against 0.04). From map's own start every one of
    those seeds fits (0.03-0.07 measured): the mean's RMSE stays below 0.3 and the noise below 0.3."""
    import jax
    from numpyro.infer.util import constrain_fn

    from bnnpp.data.uci_sets import uci
    from bnnpp.inference.map_estimate import map_start
    from bnnpp.introspection import observation

    d = uci("energy", 5, DATA_DIR)
    x, y = d.x_train, d.y_train
    model = bnnpp.models.mlp((50,), activation="relu", likelihood="heteroscedastic", prior=priors.normal(priors.half_normal(1.0)))
    start = jax.jit(map_start(model, x, y, 5000, None, hyperparameters="evidence"))
    for seed in (1, 3, 5):
        position = start(jax.random.PRNGKey(seed), (x, y))
        values = constrain_fn(model, (x[:1], y[:1]), {}, position)
        out = observation(model, values, jax.random.PRNGKey(0), x, None)
        rmse = float(np.sqrt(np.mean((np.asarray(out["loc"]) - y) ** 2)))
        assert rmse < 0.3 and float(np.mean(out["scale"])) < 0.3, (seed, rmse)
