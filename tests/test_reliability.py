"""Bad input, hostile files and faults: one-line errors before anything compiles, nothing lost,
nothing half-written."""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import time

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp import files


def _cli(*args, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "bnnpp", *args], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def _one_line_error(rc, err, match):
    assert rc == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()
    assert len(line) == 1 and match in line[0], err


# ------------------------------------------------------------------ checks before training


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--seed", "99999999999999999999"], "--seed must be below 2**32"),
        (["--steps", "3000000000"], "num_steps must be an integer ≥ 1 (and at most 2,147,483,647)"),
        (["--hidden", "100000,100000"], "latent parameters"),
    ],
)
def test_cli_out_of_range_input_is_a_one_line_error(argv, match, tmp_path):
    rc, _, err = _cli("fit", "--data", "moons", "--out", str(tmp_path / "r"), "--quiet", *argv)
    _one_line_error(rc, err, match)
    assert not (tmp_path / "r").exists()


def _no_y(x, y=None):  # observes nothing: the targets are never used
    numpyro.sample("w", dist.Normal(0, 1))
    numpyro.sample("target", dist.Normal(0, 1))


def _discrete(x, y=None):
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    numpyro.sample("y", dist.Normal(k * x[:, 0], 1.0), obs=y)


@pytest.mark.parametrize("model, match", [(_no_y, "the model observes no site: sample the targets"), (_discrete, r"discrete latent site\(s\) k")])
@pytest.mark.parametrize("method", ["map", "advi", "nuts"])
def test_models_that_cannot_be_fitted_are_refused_before_compiling(model, match, method, compile_counter):
    x, y = np.ones((10, 1), np.float32), np.zeros(10, np.float32)
    before = compile_counter()
    with pytest.raises(ValueError, match=match):
        bnnpp.fit(model, (x, y), method=method, progress=False)
    assert compile_counter() == before


def test_numpy_integer_seeds_are_accepted_and_huge_ones_refused():
    x, y = np.ones((10, 1), np.float32), np.zeros(10, np.float32)
    model = bnnpp.models.mlp((2,), likelihood="gaussian", noise=1.0, prior=bnnpp.priors.normal(1.0))
    post = bnnpp.fit(model, (x, y), method="map", seed=np.int64(3), progress=False, num_steps=5)
    assert post.stats.seed == 3
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
        bnnpp.fit(model, (x, y), method="map", seed=2**40, progress=False)


# ------------------------------------------------------------------ NaN endings


def test_cli_nan_stop_says_so_and_exits_3(tmp_path):
    flags = ["fit", "--data", "moons", "--method", "map", "--hyperprior", "fixed", "--learning-rate", "1e30", "--steps", "50",
             "--quiet", "--no-cache"]
    rc, out, err = _cli(*flags, "--out", str(tmp_path / "r"))
    assert rc == 3, err
    assert "STOPPED EARLY" in out and "Traceback" not in err
    report = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert report["stopped_at"] is not None
    rc, _, _ = _cli(*flags, "--out", str(tmp_path / "r2"), "--allow-nan-stop")
    assert rc == 0


def test_cli_sgld_nan_before_the_first_draw_is_one_line(tmp_path):
    rc, _, err = _cli("fit", "--data", "moons", "--method", "sgld", "--step-size", "10", "--burn-in", "200",
                      "--num-samples", "10", "--num-chains", "2", "--quiet", "--no-cache", "--out", str(tmp_path / "r"))
    _one_line_error(rc, err, "before the first kept draw")
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ the run folder


def test_publish_run_replaces_the_folder_whole_and_keeps_the_old_one_on_failure(tmp_path):
    out = tmp_path / "run"
    with files.run_folder_lock(out), files.publish_run(out) as tmp:
        (tmp_path / tmp / "a.txt").write_text("first")
        (tmp_path / tmp / "metrics.json").write_text('{"files": ["a.txt", "metrics.json"]}')  # what bnnpp wrote
    assert (out / "a.txt").read_text() == "first"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~_umask()
    with pytest.raises(RuntimeError), files.run_folder_lock(out), files.publish_run(out) as tmp:
        (tmp_path / tmp / "a.txt").write_text("second")
        raise RuntimeError("killed while writing")
    assert (out / "a.txt").read_text() == "first"
    with files.run_folder_lock(out), files.publish_run(out) as tmp:
        (tmp_path / tmp / "b.txt").write_text("third")
    assert sorted(os.listdir(out)) == ["b.txt"]  # the files the first run listed are gone (a user's would stay)
    assert [p for p in os.listdir(tmp_path) if p.startswith(".bnnpp-")] == []


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_lock_cleans_up_after_a_killed_writer(tmp_path):
    out = tmp_path / "run"
    stale_new = tmp_path / ".bnnpp-new-run-abc"
    stale_new.mkdir()
    (stale_new / "posterior.nc").write_text("half")
    moved_aside = tmp_path / ".bnnpp-old-run-def"  # killed between the two renames
    moved_aside.mkdir()
    (moved_aside / "metrics.json").write_text("{}")
    with files.run_folder_lock(out):
        assert not stale_new.exists() and (out / "metrics.json").exists() and not moved_aside.exists()


def test_the_lock_file_is_removed_when_the_command_ends(tmp_path):
    out = tmp_path / "run"
    (tmp_path / ".run.lock").write_text("")  # left by a killed process: nobody holds it
    with files.run_folder_lock(out):
        assert (tmp_path / ".run.lock").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), files.run_folder_lock(out):
        raise RuntimeError("the fit failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_second_writer_fails_fast(tmp_path):
    out = tmp_path / "run"
    with files.run_folder_lock(out):
        rc, _, err = _cli("fit", "--data", "moons", "--steps", "10", "--out", str(out), "--quiet", "--no-cache", timeout=120)
    _one_line_error(rc, err, "another bnnpp process is writing")


def test_a_full_disk_is_found_before_writing(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(ValueError, match="not enough disk space"):
        files.check_free_space(tmp_path, 10**6)


# ------------------------------------------------------------------ hostile files


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = bnnpp.data.load_synthetic("moons", seed=0)
    model = bnnpp.models.mlp((3,), num_classes=2, prior=bnnpp.priors.normal(1.0))
    post = bnnpp.fit(model, d, method="advi", progress=False, num_steps=20, num_samples=5)
    path = tmp_path_factory.mktemp("saved") / "p.nc"
    post.save(path)
    return post, path


def _rewrite_meta(path, out, edit):
    import h5py

    out.write_bytes(path.read_bytes())
    with h5py.File(out, "r+") as f:
        meta = json.loads(f["posterior"].attrs["bnnpp"])
        edit(meta, f)
        f["posterior"].attrs["bnnpp"] = json.dumps(meta)


def test_truncated_foreign_and_contradicting_files_give_one_valueerror(saved, tmp_path):
    post, path = saved
    raw = path.read_bytes()
    (tmp_path / "trunc.nc").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "foreign.nc").write_bytes(os.urandom(5000))
    import xarray as xr

    xr.Dataset({"a": ("x", np.arange(3))}).to_netcdf(tmp_path / "plain.nc", engine="h5netcdf")
    _rewrite_meta(path, tmp_path / "spec.nc", lambda m, f: m["sites"]["dense_0.w"].update(shape=[7, 7]))
    _rewrite_meta(path, tmp_path / "nometa.nc", lambda m, f: m.pop("sites"))
    for name, match in [("trunc.nc", "not a readable netCDF file|damaged"), ("foreign.nc", "not a readable netCDF file"),
                        ("plain.nc", "no posterior group|not a bnnpp posterior"), ("spec.nc", "its metadata says"),
                        ("nometa.nc", "metadata is damaged")]:
        with pytest.raises(ValueError, match=match):
            bnnpp.load(tmp_path / name)


def test_nan_draws_load_with_a_warning_naming_the_site(saved, tmp_path):
    import h5py

    post, path = saved
    bad = tmp_path / "nan.nc"
    bad.write_bytes(path.read_bytes())
    with h5py.File(bad, "r+") as f:
        f["posterior"]["dense_0.b"][0, 0, 0] = np.nan
    with pytest.warns(RuntimeWarning, match="dense_0.b"):
        bnnpp.load(bad)


def test_an_oversized_declaration_is_refused_before_reading(saved, tmp_path):
    import h5netcdf

    from bnnpp.posterior import io

    post, path = saved
    big = tmp_path / "big.nc"
    big.write_bytes(path.read_bytes())
    with h5netcdf.File(big, "r+") as f:  # declared, never written: the file stays small
        g = f["posterior"]
        g.dimensions.update({"huge_dim_0": 1000, "huge_dim_1": 20_000_000})  # named dimensions: every h5netcdf reads it
        g.create_variable("huge", ("chain", "huge_dim_0", "huge_dim_1"), dtype="f4", chunks=(1, 1, 1_000_000))
    assert big.stat().st_size < 5 * 2**20
    with pytest.raises(ValueError, match="declares .* GiB of arrays"):
        io.read_netcdf(big, max_bytes=2**30)


def test_a_gzip_bomb_idx_file_is_refused_without_inflating_it(tmp_path):
    from bnnpp import data

    bomb = tmp_path / "train-images-idx3-ubyte.gz"
    with gzip.open(bomb, "wb") as f:
        f.write(b"\0" * (4 * 2**20))
    with pytest.raises(ValueError, match="inflates to more than"):
        data._gunzip(str(bomb), limit=2**20)


WRITER = r"""
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("files", sys.argv[3])  # bnnpp/files.py alone: no JAX to import
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
out, tag = sys.argv[1], sys.argv[2]
with files.run_folder_lock(out), files.publish_run(out) as tmp:
    for name in ("posterior.nc", "metrics.json", "uncertainty.png"):
        with open(os.path.join(tmp, name), "w") as f:
            for _ in range(200):
                f.write(tag * 500)
                f.flush()
                time.sleep(0.0005)
"""


def _complete(out):
    names = sorted(os.listdir(out))
    assert names == ["metrics.json", "posterior.nc", "uncertainty.png"], names
    tags = {(out / n).read_text()[:1] for n in names}
    assert len(tags) == 1 and all(len((out / n).read_text()) == 200 * 500 for n in names)
    return tags.pop()


def test_kill_9_at_random_moments_leaves_the_old_run_or_the_new_one(tmp_path):
    # the writer loads bnnpp/files.py alone (it imports nothing from bnnpp), so 20 kills take seconds
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    module = files.__file__
    out = tmp_path / "run"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(script), str(out), "a", module], check=True, timeout=60)
    whole = time.perf_counter() - t0  # a writer's whole run under the machine's present load
    rng = np.random.default_rng(0)
    seen = set()
    for trial in range(20):
        tag = "bcdefghijklmnopqrstuvwxyz"[trial]
        proc = subprocess.Popen([sys.executable, str(script), str(out), tag, module])
        try:  # kill times spread over 0.05 s to 1.5 runs: about a third land after the publish, whatever the load
            proc.wait(timeout=float(rng.uniform(0.05, 1.5 * whole)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with files.run_folder_lock(out):  # what the next run does first
            seen.add(_complete(out) == tag)
    assert seen == {True, False}  # some kills landed before the publish, some after
    assert [p for p in os.listdir(tmp_path) if p.startswith(".bnnpp-")] == []


# ------------------------------------------------------------------ tiny and read-only file systems


@pytest.fixture
def tiny_fs(tmp_path):
    """A 2 MiB tmpfs (needs root and mount rights: skipped elsewhere)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_is_one_line_and_the_previous_run_survives(tiny_fs):
    out = tiny_fs / "run"
    flags = ["fit", "--data", "moons", "--method", "advi", "--steps", "20", "--quiet", "--no-cache", "--out", str(out)]
    rc, _, err = _cli(*flags, "--num-samples", "10")
    assert rc == 0, err
    before = (out / "metrics.json").read_text()
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\0" * (2 * 2**20 - (sum(f.stat().st_size for f in out.iterdir()) + 64 * 1024)))
    rc, _, err = _cli(*flags, "--num-samples", "1000")
    assert rc == 2 and "Traceback" not in err and "Segmentation" not in err, err
    assert len(err.strip().splitlines()) == 1 and ("disk space" in err or "No space" in err), err
    assert (out / "metrics.json").read_text() == before  # the old run is intact
    assert [p for p in os.listdir(tiny_fs) if p.startswith(".bnnpp-")] == []


def test_a_read_only_out_is_refused_before_compiling(tiny_fs):
    proc = subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot remount read-only here ({proc.stderr.strip()})")
    rc, out, err = _cli("fit", "--data", "moons", "--steps", "20", "--quiet", "--no-cache", "--out", str(tiny_fs / "run"))
    _one_line_error(rc, err, "cannot write to")
    assert "seconds" not in out  # nothing trained


def test_out_must_be_a_run_folder_or_new(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    rc, _, err = _cli("fit", "--data", "moons", "--out", str(tmp_path / "mine"), "--quiet")
    _one_line_error(rc, err, "not a bnnpp run")
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"
    rc, _, err = _cli("fit", "--data", "moons", "--out", "", "--quiet")
    _one_line_error(rc, err, "--out is empty")


def test_saving_to_a_folder_is_a_one_line_error(saved, tmp_path):
    post, _ = saved
    with pytest.raises(ValueError, match="is a folder: give the file to write"):
        post.save(tmp_path)


@pytest.mark.slow
def test_kill_9_during_training_leaves_the_previous_run_and_resume_finishes(tmp_path):
    out = tmp_path / "run"
    flags = ["fit", "--data", "moons", "--method", "bbb", "--epochs", "3000", "--batch-size", "100", "--num-samples", "20",
             "--quiet", "--checkpoint-every", "200", "--out", str(out)]
    rc, _, err = _cli(*flags[:-2], "--out", str(out))
    assert rc == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rng = np.random.default_rng(1)
    for _ in range(20):
        proc = subprocess.Popen([sys.executable, "-m", "bnnpp", *flags, "--resume"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=float(rng.uniform(1.0, 8.0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        now = {p.name: p.read_bytes() for p in out.iterdir()}
        if now != before:  # published before the kill (or finished): it must be a complete new run
            assert sorted(now) == ["config.toml", "metrics.json", "posterior.nc", "uncertainty.png"]
            assert json.loads(now["metrics.json"])["files"][0] == "posterior.nc"
            bnnpp.load(out / "posterior.nc")
            before = now
    rc, _, err = _cli(*flags, "--resume")
    assert rc == 0, err
    bnnpp.load(out / "posterior.nc")


@pytest.mark.parametrize("command", ["evaluate", "prune"])
def test_evaluate_and_prune_turn_a_damaged_posterior_into_one_line(saved, tmp_path, command):
    _, path = saved
    run = tmp_path / "run"
    run.mkdir()
    (run / "posterior.nc").write_bytes(path.read_bytes()[:3000])
    idx = tmp_path / "mnist"  # a tiny valid MNIST-format folder, so that only the posterior is at fault
    idx.mkdir()
    for name, magic, shape in [("train-images-idx3-ubyte.gz", 2051, (20, 28, 28)), ("t10k-images-idx3-ubyte.gz", 2051, (10, 28, 28)),
                               ("train-labels-idx1-ubyte.gz", 2049, (20,)), ("t10k-labels-idx1-ubyte.gz", 2049, (10,))]:
        header = np.array([magic, *shape], ">u4").tobytes()
        with gzip.open(idx / name, "wb") as f:
            f.write(header + np.zeros(int(np.prod(shape)), np.uint8).tobytes())
    (run / "metrics.json").write_text(json.dumps({"data": "mnist", "data_dir": str(idx), "normalize": "255", "validation": 0}))
    rc, _, err = _cli(command, str(run))
    _one_line_error(rc, err, "posterior.nc")
