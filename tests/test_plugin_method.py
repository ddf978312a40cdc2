"""A new method is one file plus one import line: tests/plugin_method/averaged_sgd.py (MAP by
SGD with iterate averaging, under 80 lines) fits, saves, reloads in a fresh process, resumes
from a checkpoint and appears in ``bnnpp fit --help``, with nothing else in bnnpp changed."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from interrupting import interrupt_after

import bnnpp
from bnnpp.inference import TrainingInterrupted
from bnnpp.inference.registry import unregister

PLUGIN = Path(__file__).parent / "plugin_method"
ROOT = Path(__file__).parent.parent


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))
    module = importlib.import_module("averaged_sgd")  # the one import line a user adds
    yield module
    unregister("averaged_sgd")  # the other tests see the built-in registry (the help snapshot's)
    sys.modules.pop("averaged_sgd", None)


def test_the_plugin_is_one_short_file():
    assert len((PLUGIN / "averaged_sgd.py").read_text().splitlines()) < 80


# slow: three fits and a fresh interpreter that imports JAX (about 2 minutes on the loaded 2-core
# machine); the fast set covers the same runner path with test_contract's registered rwm
@pytest.mark.slow
def test_plugin_method_fits_saves_loads_resumes(plugin, tmp_path, monkeypatch):
    data = bnnpp.data.load_synthetic("moons", seed=0)
    net = bnnpp.models.mlp((8,), num_classes=2)
    options = {"num_steps": 300, "learning_rate": 0.5, "batch_size": 100}
    post = bnnpp.fit(net, data, method="averaged_sgd", seed=0, progress=False, **options)
    assert post.method == "averaged_sgd" and post.num_chains == 1 and post.num_draws == 1
    accuracy = float(np.mean(post.predict(data.x_test).mean.argmax(-1) == data.y_test))
    assert accuracy > 0.8  # moons: a 2-class MAP fit of 300 steps separates them (chance 0.5)
    path = tmp_path / "sgd.nc"
    post.save(path)
    # a fresh process that imports bnnpp only (not the plugin) reloads it and predicts the same
    code = ("import sys, json, numpy as np, bnnpp; p = bnnpp.load(sys.argv[1]); "
            "print(json.dumps([p.method, np.asarray(p.predict(np.load(sys.argv[2])).mean).tolist()]))")
    np.save(tmp_path / "x.npy", data.x_test[:5])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "x.npy")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    method, mean = json.loads(proc.stdout.strip().splitlines()[-1])
    assert method == "averaged_sgd"
    np.testing.assert_allclose(mean, np.asarray(post.predict(data.x_test[:5]).mean), rtol=1e-6)
    # the runner gives it checkpoints: stopped after its first chunk and resumed, the same fit
    with monkeypatch.context() as m:
        interrupt_after(m, 1)
        with pytest.raises(TrainingInterrupted):
            bnnpp.fit(net, data, method="averaged_sgd", seed=0, progress=False, checkpoint_dir=tmp_path / "ck", **options)
    resumed = bnnpp.fit(net, data, method="averaged_sgd", seed=0, progress=False, checkpoint_dir=tmp_path / "ck", resume=True,
                        **options)
    for site, value in post.samples.items():
        np.testing.assert_array_equal(resumed.samples[site], value)


def test_plugin_method_appears_in_fit_help(plugin, capsys):
    """``bnnpp fit --help`` prints a snapshot of the built-in methods' parser; a registry that
    differs from the snapshot's (here: one more method) builds the live parser instead."""
    from bnnpp.cli import main

    with pytest.raises(SystemExit) as e:
        main(["fit", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "averaged_sgd" in text and "--average-from" in text
