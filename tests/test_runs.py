"""Run-folder library code: the atomic-write helpers of ``bnnpp.files`` leave nothing
half-written and give files normal permissions; ``bnnpp.runs`` reloads a run's data from its
record and writes report folders; the names that moved out of the CLI still import, with a
DeprecationWarning. All fast: no fitting."""

from __future__ import annotations

import importlib
import json
import os
import stat

import numpy as np
import pytest

import bnnpp
from bnnpp import evaluation, files, reports, runs


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- bnnpp.files ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode, content", [("w", "new text"), ("wb", b"new bytes")])
def test_atomic_file_writes_with_normal_permissions(tmp_path, umask_022, mode, content):
    target = tmp_path / "sub" / "out.txt"  # the folder is created
    with files.atomic_file(target, mode) as f:
        f.write(content)
        assert not target.exists()  # nothing visible until the block ends
    assert (target.read_bytes() if mode == "wb" else target.read_text()) == content
    assert _mode(target) == 0o644  # not mkstemp's 0600
    assert _listing(target.parent) == ["out.txt"]


def test_atomic_file_keeps_the_old_file_when_the_writer_raises(tmp_path):
    target = tmp_path / "table.md"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="disk full"):
        with files.atomic_file(target) as f:
            f.write("half of the new")
            raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert _listing(tmp_path) == ["table.md"]  # the temporary file is gone


def test_atomic_file_rejects_read_and_append_modes(tmp_path):
    for mode in ("r", "a", "w+"):
        with pytest.raises(ValueError, match="mode must be"):
            with files.atomic_file(tmp_path / "x", mode):
                pass


def test_atomic_path_keeps_the_extension_and_cleans_up(tmp_path, umask_022):
    target = tmp_path / "arrays.npz"
    with files.atomic_path(target) as tmp:
        assert tmp.endswith(".npz") and os.path.basename(tmp).startswith(".")
        np.savez(tmp, a=np.arange(3))  # np.savez appends .npz to any other name
    np.testing.assert_array_equal(np.load(target)["a"], np.arange(3))
    assert _mode(target) == 0o644
    with pytest.raises(KeyError):
        with files.atomic_path(target) as tmp:
            np.savez(tmp, a=np.zeros(5))
            raise KeyError("late failure")
    np.testing.assert_array_equal(np.load(target)["a"], np.arange(3))  # the old file stays
    assert _listing(tmp_path) == ["arrays.npz"]


def test_publish_folder_creates_the_folder_only_on_success(tmp_path, umask_022):
    out = tmp_path / "parent" / "run"
    with pytest.raises(ValueError, match="boom"):
        with files.publish_folder(out) as tmp:
            (tmp_path / "marker").write_text(tmp)
            with open(os.path.join(tmp, "a.json"), "w") as f:
                f.write("{}")
            raise ValueError("boom")
    assert not out.exists() and _listing(out.parent) == []  # no output, no temporary folder
    with files.publish_folder(out) as tmp:
        assert os.path.dirname(tmp) == str(out.parent)  # beside the new folder
        for name in ("a.json", "b.md"):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(name)
    assert _listing(out) == ["a.json", "b.md"] and _listing(out.parent) == ["run"]
    assert _mode(out / "a.json") == 0o644


def test_publish_folder_replaces_files_of_an_existing_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "posterior.nc").write_text("kept")
    (run / "prune.md").write_text("old")
    with pytest.raises(OSError):
        with files.publish_folder(run, prefix=".prune-") as tmp:
            assert os.path.dirname(tmp) == str(run)  # inside the existing folder
            with open(os.path.join(tmp, "prune.md"), "w") as f:
                f.write("half")
            raise OSError("interrupted")
    assert (run / "prune.md").read_text() == "old" and _listing(run) == ["posterior.nc", "prune.md"]
    with files.publish_folder(run, prefix=".prune-") as tmp:
        for name, text in (("prune.md", "new"), ("prune.json", "{}")):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
    assert _listing(run) == ["posterior.nc", "prune.json", "prune.md"]
    assert (run / "prune.md").read_text() == "new" and (run / "posterior.nc").read_text() == "kept"


def test_publish_folder_refuses_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="is a file"):
        with files.publish_folder(tmp_path / "f"):
            pass


def test_write_report_leaves_nothing_when_a_figure_fails(tmp_path):
    class BadFigure:
        def savefig(self, *args, **kwargs):
            raise RuntimeError("no backend")

    report = {"num_samples": 1, "tau": 0.2, "ood": {}, "test": {
        "n": 1, "error": 0.0, "nll": 0.1, "brier": 0.0, "ece": 0.0, "rejected": 0.0, "mean_entropy": 0.1,
        "mean_mutual_information": 0.0, "sure_but_wrong": [], "lowest_confidence": []}}
    with pytest.raises(RuntimeError, match="no backend"):
        evaluation.write_report(tmp_path, report, {"a.png": BadFigure()}, {"y": np.zeros(1)})
    assert _listing(tmp_path) == []
    names = evaluation.write_report(tmp_path, report, {}, {"y": np.zeros(1)})
    assert sorted(names) == _listing(tmp_path) == ["evaluation.json", "evaluation.md", "evaluation.npz"]
    assert (tmp_path / "evaluation.md").read_text() == reports.evaluation_markdown(dict(report, figures=[]))


# --- bnnpp.runs -----------------------------------------------------------------------------


@pytest.mark.parametrize("record", [
    {"data": "moons", "data_noise": 0.1, "seed": 3},
    {"data": "sinusoid", "data_noise": None, "seed": 0},
])
def test_dataset_from_record_round_trip(record):
    ds = runs.dataset_from_record(json.loads(json.dumps(record)))  # as read back from metrics.json
    noise = {} if record["data_noise"] is None else {"noise": record["data_noise"]}
    ref = bnnpp.data.load_synthetic(record["data"], seed=record["seed"], **noise)
    for split in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(ds, split), getattr(ref, split))
    with pytest.raises(ValueError, match="the report names no known dataset"):
        runs.dataset_from_record({"data": "cifar10"})


def test_write_sweep_run(tmp_path):
    table = [{"data": "moons", "weight_prior": "normal", "hyperprior": "fixed", "scale": 1.0,
              "accuracy_mean": 0.9, "accuracy_sd": 0.01, "nll_mean": 0.3, "nll_sd": 0.02}]
    meta = {"method": "map", "seeds": [0], "runs": 1, "seconds": 1.0, "vmap": True}
    runs.write_sweep_run(tmp_path / "sw", meta, table, [{"seed": 0}])
    assert _listing(tmp_path) == ["sw"] and _listing(tmp_path / "sw") == ["sweep.json", "sweep.md"]
    assert json.loads((tmp_path / "sw" / "sweep.json").read_text()) == {"meta": meta, "table": table, "runs": [{"seed": 0}]}
    assert "| moons | normal | fixed (best: 1) | 0.900 ± 0.010 | 0.300 ± 0.020 |" in (tmp_path / "sw" / "sweep.md").read_text()


# --- the old homes of moved names -----------------------------------------------------------

MOVED = [
    ("bnnpp.cli.fit", "load_dataset_from_report", runs.dataset_from_record),
    ("bnnpp.cli.fit", "evaluate", runs.metrics_on_test_set),
    ("bnnpp.cli.fit", "block_rows", runs.block_rows),
    ("bnnpp.cli.fit", "loss_figure", runs.loss_figure),
    ("bnnpp.cli.fit", "figure", runs.figure),
    ("bnnpp.cli.evaluate", "check_run_dir", runs.check_run_dir),
    ("bnnpp.cli.evaluate", "open_run", runs.open_run),
    ("bnnpp.cli.evaluate", "fashion_like", runs.fashion_like),
    ("bnnpp.cli.evaluate", "evaluate_run", runs.evaluate_run),
    ("bnnpp.cli.prune", "prune_run", runs.prune_run),
    ("bnnpp.cli.prune", "DEFAULT_FRACTIONS", runs.DEFAULT_FRACTIONS),
    ("bnnpp.cli.prune", "PUBLISHED", reports.PUBLISHED_PRUNING),
    ("bnnpp.cli.compare", "write_figures", runs.write_compare_figures),
    ("bnnpp.cli.sweep", "markdown", reports.sweep_markdown),
]


@pytest.mark.parametrize("module, name, new", MOVED, ids=[f"{m}.{n}" for m, n, _ in MOVED])
def test_moved_names_warn_and_still_work(module, name, new):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{name} moved to bnnpp\."):
        assert getattr(mod, name) is new
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        mod.no_such_name  # noqa: B018


def test_old_import_statement_warns():
    with pytest.warns(DeprecationWarning, match="bnnpp.runs.dataset_from_record"):
        from bnnpp.cli.fit import load_dataset_from_report
    assert load_dataset_from_report({"data": "moons", "seed": 1}).x_train.shape == (700, 2)


def test_cli_modules_do_not_import_each_other():
    """Each command module imports library code and private ``bnnpp.cli._*`` modules only
    (``_errors``/``_help``/``_data``, shared by the commands; ``_fit_flags``/``_fit_setup``, fit's
    own parts), never another command."""
    import ast
    import pathlib

    folder = pathlib.Path(bnnpp.__file__).parent / "cli"
    for path in folder.glob("*.py"):
        if path.name in ("__init__.py", "_help_snapshot.py"):  # the parser's package and the tool that snapshots its help
            continue
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert all(m.startswith("bnnpp.cli._") for m in imported if m.startswith("bnnpp.cli")), path.name
