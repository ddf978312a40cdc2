"""A damaged checkpoint is refused before the storage layer reads it.

A checkpoint records the size and SHA-256 of every file orbax wrote under its ``arrays/``
folder; resuming checks them first, so a truncated, changed or missing array file is one
``ValueError`` line naming the file and the choices (an undamaged copy, the previous
checkpoint, or starting over), and orbax is never called on it. Through the CLI that is one
line on stderr and status 2, with no traceback from tensorstore's threads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import bnnpp
from bnnpp.inference.checkpoints import CHECKSUMS, Checkpointer, Checkpointing, fingerprint

X = np.linspace(-1, 1, 20, dtype=np.float32).reshape(10, 2)
Y = (X[:, 0] > 0).astype(np.int32)
STATE = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.linspace(0, 1, 40, dtype=np.float32), "t": np.int32(7)}
MAP = {"num_steps": 300, "batch_size": 100, "chunk_size": 20}


def _keeper(directory) -> Checkpointer:
    model = bnnpp.models.mlp((3,), num_classes=2)
    return Checkpointer(Checkpointing(os.fspath(directory), every_steps=1), fingerprint("map", 0, {"num_steps": 10}, X, Y, 5, model=model))


def _restore(keeper):
    return keeper.restore(jax.tree_util.tree_structure(STATE), None)


def _array_files(step_dir) -> list[str]:
    """The files orbax wrote under ``step_dir/arrays``, relative to ``step_dir``."""
    out = []
    for root, _, names in os.walk(os.path.join(step_dir, "arrays")):
        out += [os.path.relpath(os.path.join(root, n), step_dir).replace(os.sep, "/") for n in names]
    return sorted(out)


@pytest.fixture
def orbax_restores(monkeypatch):
    """How many times orbax's ``CheckpointManager.restore`` was called in the test."""
    import orbax.checkpoint as ocp

    calls = []
    restore = ocp.CheckpointManager.restore

    def counted(self, *args, **kwargs):
        calls.append(args)
        return restore(self, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", counted)
    return calls


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A checkpoint folder with checkpoints at steps 4 and 5, and the files under step 5's ``arrays/``."""
    ck = tmp_path_factory.mktemp("saved") / "ck"
    keeper = _keeper(ck)
    assert keeper.save(4, 4, STATE, [], [])
    assert keeper.save(5, 5, STATE, [], [])
    return ck, _array_files(ck / "5")


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _flip(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))


DAMAGE = {
    "truncated": (_truncate, "has {} bytes, {} expected"),
    "one byte changed": (_flip, "does not match its checksum"),
    "deleted": (os.remove, "is missing"),
}


def test_the_checksums_cover_every_array_file(saved):
    ck, names = saved
    with open(ck / "5" / CHECKSUMS) as f:
        recorded = json.load(f)["files"]
    assert sorted(recorded) == names and len(names) >= 3
    assert any("/d/" in n for n in names)  # the data files, not only orbax's metadata
    for name in names:
        assert recorded[name]["bytes"] == os.path.getsize(ck / "5" / name)
    assert not [n for n in os.listdir(ck / "5") if ".tmp" in n]  # written atomically: no temporary file left


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_array_file_is_named_before_orbax_reads_it(saved, tmp_path, orbax_restores, damage):
    source, names = saved
    change, problem = DAMAGE[damage]
    for name in names:  # every file orbax wrote: each is caught
        ck = tmp_path / name.replace("/", "_")
        shutil.copytree(source, ck)
        size = os.path.getsize(ck / "5" / name)
        change(ck / "5" / name)
        expected = problem.format(os.path.getsize(ck / "5" / name), size) if damage == "truncated" else problem
        with pytest.raises(ValueError) as error:
            _restore(_keeper(ck))
        message = str(error.value)
        assert message == (
            f"the checkpoint {ck / '5'} is damaged ({name} {expected}): resume from an undamaged copy of {ck} "
            f"or from its step 4 checkpoint (delete {ck / '5'} first), or delete {ck} to start over"
        )
        assert "\n" not in message and error.value.__cause__ is None and error.value.__context__ is None
    assert orbax_restores == []  # refused before any restore


def test_the_checksum_file_itself_damaged_is_refused(saved, tmp_path, orbax_restores):
    ck = tmp_path / "ck"
    shutil.copytree(saved[0], ck)
    (ck / "5" / CHECKSUMS).write_text('{"files": ')
    with pytest.raises(ValueError, match=rf"is damaged \({CHECKSUMS} cannot be read\)"):
        _restore(_keeper(ck))
    assert orbax_restores == []


def test_an_intact_checkpoint_restores_after_its_checksums_are_checked(saved, tmp_path, orbax_restores):
    ck = tmp_path / "ck"
    shutil.copytree(saved[0], ck)
    rs, pieces, next_unit, val_log, step = _restore(_keeper(ck))
    assert (step, next_unit, pieces, val_log) == (5, 5, [], [])
    for k, v in STATE.items():
        np.testing.assert_array_equal(rs[k], v)
    assert len(orbax_restores) == 1


def test_a_checkpoint_without_checksums_is_read_as_before_and_its_storage_error_is_one_short_line(saved, tmp_path):
    # as one written before the checksums: orbax reads it, and its error loses the storage spec
    ck = tmp_path / "ck"
    shutil.copytree(saved[0], ck)
    for step in ("4", "5"):
        os.remove(ck / step / CHECKSUMS)
    rs, *_ = _restore(_keeper(ck))
    np.testing.assert_array_equal(rs["w"], STATE["w"])
    data = [n for n in saved[1] if "/d/" in n]
    for name in data:
        _truncate(ck / "5" / name)
    with pytest.raises(ValueError) as error:
        _restore(_keeper(ck))
    message = str(error.value)
    assert message.startswith(f"the checkpoint {ck / '5'} is damaged (") and message.endswith(f"or delete {ck} to start over")
    assert "\n" not in message and "tensorstore_spec" not in message and len(message) < 500


def test_checksums_that_cannot_be_written_warn_and_the_checkpoint_stands(tmp_path, monkeypatch):
    import errno

    replace = os.replace

    def full_disk(src, dst):
        if os.fspath(dst).endswith(CHECKSUMS):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk)
    keeper = _keeper(tmp_path / "ck")
    with pytest.warns(RuntimeWarning, match="checkpoint at step 5 written without its file checksums: No space left on device"):
        assert keeper.save(5, 5, STATE, [], [])
    monkeypatch.undo()
    assert not [n for n in os.listdir(tmp_path / "ck" / "5") if CHECKSUMS in n]  # neither the record nor its temporary file
    rs, *_ = _restore(_keeper(tmp_path / "ck"))  # checked by its digest once orbax has read it
    np.testing.assert_array_equal(rs["b"], STATE["b"])


def test_an_undamaged_checkpoint_resumes_to_the_same_fit_and_the_earlier_one_stands_in(tmp_path, orbax_restores):
    moons = bnnpp.data.load_synthetic("moons", seed=0)
    net = bnnpp.models.mlp((4,), num_classes=2)
    ck = tmp_path / "ck"
    whole = bnnpp.fit(net, moons, method="map", seed=0, progress=False, checkpoint_dir=ck, checkpoint_every=100, **MAP)
    assert sorted(int(p) for p in os.listdir(ck) if p.isdigit()) == [200, 300]
    data = max(_array_files(ck / "300"), key=lambda n: os.path.getsize(ck / "300" / n))
    _flip(ck / "300" / data)
    with pytest.raises(ValueError, match=rf"300 is damaged \({data} does not match its checksum\).* from its step 200 checkpoint"):
        Checkpointer(Checkpointing(os.fspath(ck)), {}).restore(None, None)  # what resume=True meets, without a compile
    assert orbax_restores == []
    shutil.rmtree(ck / "300")  # as the message says: the step-200 checkpoint is resumed, and the fit is the same
    resumed = bnnpp.fit(net, moons, method="map", seed=0, progress=False, checkpoint_dir=ck, checkpoint_every=100, resume=True, **MAP)
    assert len(orbax_restores) == 1 and resumed.stats.steps_run == whole.stats.steps_run
    for site, value in whole.samples.items():
        np.testing.assert_array_equal(resumed.samples[site], value)


CLI = ["fit", "--data", "moons", "--method", "map", "--num-steps", "20", "--hidden", "3", "--hyperprior", "fixed", "--quiet", "--no-cache"]


def test_cli_resume_of_a_damaged_checkpoint_is_one_line_and_status_2(saved, tmp_path):
    ck = tmp_path / ".run.checkpoints"  # where `bnnpp fit --out run` keeps its checkpoints
    shutil.copytree(saved[0], ck)
    data = max((n for n in saved[1] if "/d/" in n), key=lambda n: os.path.getsize(ck / "5" / n))
    _truncate(ck / "5" / data)
    argv = [sys.executable, "-m", "bnnpp", *CLI, "--out", str(tmp_path / "run"), "--resume"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"bnnpp fit: error: the checkpoint {ck / '5'} is damaged ({data} has "), proc.stderr
    assert lines[0].endswith(f"or delete {ck} to start over"), proc.stderr
    assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr
    assert not (tmp_path / "run").exists()
