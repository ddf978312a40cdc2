"""A NumPyro imported lazily before bnnpp (as ArviZ 1.x does, through ``lazy_loader``) is
loaded whole and repaired (:mod:`bnnpp.lazy_modules`): a model with a constrained latent fits.
Run in a fresh process, where nothing has imported NumPyro yet."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

LAZY_NUMPYRO = """
import importlib.util, sys
for name in ("jax", "numpyro"):  # what ArviZ 1.x's lazy_loader.load(name) does: nothing runs yet
    spec = importlib.util.find_spec(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    importlib.util.LazyLoader(spec.loader).exec_module(module)
"""

FIT = """
import numpy as np, numpyro.distributions as dist, numpyro
def model(x, y=None):
    s = numpyro.sample("s", dist.HalfNormal(1.0))  # a constrained latent: NumPyro adds its log-det factor
    numpyro.sample("y", dist.Normal(0.0, s).expand([x.shape[0]]), obs=y)
x = np.zeros((10, 1), np.float32); y = np.linspace(-1, 1, 10).astype(np.float32)
post = bnnpp.fit(model, (x, y), method="advi", num_steps=20, num_samples=5, progress=False)  # advi: NumPyro adds the log-det factor
print("fitted", post.samples["s"].shape)
"""


@pytest.mark.parametrize("order", ["bnnpp_after", "bnnpp_before"])
def test_fit_after_a_lazy_numpyro(order):
    """``bnnpp_after``: the lazy NumPyro and a submodule imported before bnnpp (the README's
    ``import arviz as az, bnnpp`` followed by a user's ``import numpyro.distributions``);
    ``bnnpp_before``: bnnpp imported first, then the lazy NumPyro, then the fit."""
    body = LAZY_NUMPYRO + "import numpyro.distributions\nimport bnnpp\n" if order == "bnnpp_after" else "import bnnpp\n" + LAZY_NUMPYRO
    code = textwrap.dedent(body + FIT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fitted (1, 5)" in out.stdout
