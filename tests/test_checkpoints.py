"""Checkpoints and resume in the runner, and clean stops on SIGINT / SIGTERM.

A fit interrupted after a chunk and resumed from its checkpoint gives the same draws, traces
and sample statistics, bit for bit, as the uninterrupted fit with the same seed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import bnnpp
from bnnpp.inference import TrainingInterrupted
from interrupting import interrupt_after

CASES = {
    "map": {"num_steps": 300, "batch_size": 100, "chunk_size": 20},
    "advi": {"num_steps": 300, "num_samples": 20, "chunk_size": 20},
    "bbb": {"epochs": 60, "batch_size": 100, "num_samples": 20, "chunk_size": 21},
    "sgld": {"num_samples": 30, "burn_in": 60, "num_chains": 2, "batch_size": 100, "thinning": 2, "chunk_size": 5},
}


@pytest.fixture(scope="module")
def moons():
    return bnnpp.data.load_synthetic("moons", seed=0)


@pytest.fixture(scope="module")
def net():
    return bnnpp.models.mlp((4,), num_classes=2, prior=bnnpp.priors.normal(bnnpp.priors.half_normal(1.0)))




def _assert_same(a, b):
    for k in a.samples:
        np.testing.assert_array_equal(a.samples[k], b.samples[k])
    assert a.stats.traces.keys() == b.stats.traces.keys()
    for k in a.stats.traces:
        np.testing.assert_array_equal(a.stats.traces[k], b.stats.traces[k])
    for k in a.stats.sample_stats:
        np.testing.assert_array_equal(a.stats.sample_stats[k], b.stats.sample_stats[k])
    assert a.stats.steps_run == b.stats.steps_run


@pytest.mark.parametrize("method", sorted(CASES))
def test_resume_is_bit_identical(method, moons, net, tmp_path, monkeypatch):
    options = CASES[method]
    whole = bnnpp.fit(net, moons, method=method, seed=4, progress=False, **options)
    with monkeypatch.context() as m:
        interrupt_after(m, 3)
        with pytest.raises(TrainingInterrupted) as stop:
            bnnpp.fit(net, moons, method=method, seed=4, progress=False, checkpoint_dir=tmp_path / "ck", **options)
    assert stop.value.exit_code == 130 and stop.value.checkpoint_dir == os.fspath((tmp_path / "ck").resolve())
    assert 0 < stop.value.step < whole.stats.steps_run
    resumed = bnnpp.fit(net, moons, method=method, seed=4, progress=False, checkpoint_dir=tmp_path / "ck", resume=True, **options)
    _assert_same(resumed, whole)


def test_sigterm_without_checkpoint_dir_stops_cleanly(moons, net, monkeypatch):
    interrupt_after(monkeypatch, 2, signal.SIGTERM)
    with pytest.raises(TrainingInterrupted, match="no checkpoint") as stop:
        bnnpp.fit(net, moons, method="map", seed=0, progress=False, **CASES["map"])
    assert stop.value.exit_code == 143 and stop.value.checkpoint_dir is None


def test_periodic_checkpoints_and_a_foreign_checkpoint_is_refused(moons, net, tmp_path):
    ck = tmp_path / "ck"
    bnnpp.fit(net, moons, method="map", seed=0, progress=False, checkpoint_dir=ck, checkpoint_every=100, **CASES["map"])
    assert sorted(int(p) for p in os.listdir(ck) if p.isdigit())[-1] == 300  # the last two kept
    with pytest.raises(ValueError, match="another fit .*seed"):
        bnnpp.fit(net, moons, method="map", seed=1, progress=False, checkpoint_dir=ck, resume=True, **CASES["map"])


def test_a_checkpoint_is_never_discarded_without_being_asked(moons, net, tmp_path, compile_counter):
    # resume=None (the default) refuses a folder holding a checkpoint, before compiling;
    # resume=False deletes it and starts over
    ck = tmp_path / "ck"
    first = bnnpp.fit(net, moons, method="map", seed=0, progress=False, checkpoint_dir=ck, checkpoint_every=100, **CASES["map"])
    before = compile_counter()
    with pytest.raises(ValueError, match="holds a checkpoint of an earlier fit: pass resume=True .* or resume=False"):
        bnnpp.fit(net, moons, method="map", seed=1, progress=False, checkpoint_dir=ck, **CASES["map"])
    assert compile_counter() == before
    assert sorted(int(p) for p in os.listdir(ck) if p.isdigit())[-1] == 300  # untouched
    again = bnnpp.fit(net, moons, method="map", seed=0, progress=False, checkpoint_dir=ck, resume=False, **CASES["map"])
    for site, value in first.samples.items():  # the same fit, from step 0
        np.testing.assert_array_equal(again.samples[site], value)


def test_checkpoint_arguments_are_checked_before_compiling(moons, net, tmp_path, compile_counter):
    before = compile_counter()
    with pytest.raises(ValueError, match="needs checkpoint_dir"):
        bnnpp.fit(net, moons, method="map", resume=True)
    with pytest.raises(ValueError, match="every_steps must be an integer"):
        bnnpp.fit(net, moons, method="map", checkpoint_dir=tmp_path, checkpoint_every=0)
    assert compile_counter() == before


@pytest.mark.slow  # ~60 s: three NUTS runs with their compiles
def test_nuts_checkpoints_and_resumes_in_the_middle_of_the_draws(moons, net, tmp_path, monkeypatch):
    options = {"num_chains": 2, "num_warmup": 30, "num_samples": 30}
    whole = bnnpp.fit(net, moons, method="nuts", seed=2, progress=False, checkpoint_dir=tmp_path / "a", checkpoint_every=10,
                      **options)
    assert whole.samples["dense_0.w"].shape[:2] == (2, 30)
    with monkeypatch.context() as m:
        interrupt_after(m, 3, signal.SIGTERM)
        with pytest.raises(TrainingInterrupted) as stop:
            bnnpp.fit(net, moons, method="nuts", seed=2, progress=False, checkpoint_dir=tmp_path / "b", checkpoint_every=10,
                      **options)
    assert stop.value.exit_code == 143 and 0 < stop.value.step < 60
    resumed = bnnpp.fit(net, moons, method="nuts", seed=2, progress=False, checkpoint_dir=tmp_path / "b", checkpoint_every=10,
                        resume=True, **options)
    _assert_same(resumed, whole)


def _cli(*args, **kw):
    env = dict(os.environ)
    if jax.default_backend() == "gpu":  # XLA GPU's reductions differ run to run unless told (README, checkpoints)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
    return subprocess.Popen([sys.executable, "-m", "bnnpp", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **kw)


@pytest.mark.slow  # ~80 s; the in-process resume tests (every method, bit-identical) stay in the fast set
def test_cli_ctrl_c_checkpoints_and_resume_finishes_the_same_fit(tmp_path):
    flags = ["fit", "--data", "moons", "--method", "bbb", "--epochs", "4000", "--batch-size", "100", "--num-samples", "20",
             "--quiet", "--no-cache", "--checkpoint-every", "100"]
    out = tmp_path / "run"
    proc = _cli(*flags, "--out", str(out))
    deadline = time.monotonic() + 120
    checkpoints = tmp_path / ".run.checkpoints"
    while not checkpoints.is_dir() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    line = err.strip().splitlines()
    assert len(line) == 1 and "SIGINT: stopped after step" in line[0] and "--resume" in line[0] and "Traceback" not in err
    assert not (out / "posterior.nc").exists() and checkpoints.is_dir()
    done = _cli(*flags, "--out", str(out), "--resume")
    _, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    assert "no checkpoint" not in err
    assert not checkpoints.exists()  # removed once the run is complete
    whole = _cli(*flags, "--out", str(tmp_path / "whole"), "--resume")  # nothing to resume: a fresh fit, and a notice
    _, err = whole.communicate(timeout=300)
    assert whole.returncode == 0, err
    assert "--resume: no checkpoint in" in err and "training from step 0" in err
    assert not list(tmp_path.glob(".*.lock"))  # the run-folder locks are removed
    a, b = bnnpp.load(out / "posterior.nc"), bnnpp.load(tmp_path / "whole" / "posterior.nc")
    _assert_same(a, b)


def test_cli_refuses_an_unwritable_out_before_compiling(tmp_path):
    (tmp_path / "file").write_text("")
    proc = _cli("fit", "--data", "moons", "--out", str(tmp_path / "file" / "run"), "--quiet")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "is a file" in err and "Traceback" not in err
