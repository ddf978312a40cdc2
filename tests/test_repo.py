"""The README's test command is the one CI runs; the quickstart benchmark runs."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from shared_data import DATA_DIR

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = [line for line in ci if line.startswith("python3 -m venv")]
    assert len(command) == 1
    readme = (ROOT / "README.md").read_text()
    assert command[0] in readme
    assert "bnnpp fit --data moons" in readme


def test_ci_refuses_in_one_line_without_python_3_12(tmp_path):
    """.ci/run finds each leg's Python under pyenv's versions; a pyenv shim on PATH that fails
    (python3.12 when 3.12 is not selected) does not count, and a missing 3.12 stops the run
    before any venv with one line naming it."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "run").write_text((ROOT / ".ci" / "run").read_text())
    fake = tmp_path / "pyenv-root" / "versions" / "3.11.7" / "bin" / "python3"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\n[ "$1" = "-c" ] && echo 3.11 || echo "Python 3.11.7"\n')
    bin_ = tmp_path / "bin"  # only what the script needs: no real Python can be found
    bin_.mkdir()
    (bin_ / "pyenv").write_text(f'#!/bin/sh\necho "{fake.parents[3]}"\n')
    (bin_ / "python3.12").write_text('#!/bin/sh\necho "pyenv: python3.12: command not found" >&2\nexit 127\n')
    for tool in ("ls", "sort", "dirname", "mktemp", "rm", "chmod"):
        (bin_ / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True, check=True).stdout.strip())
    for p in (fake, bin_ / "pyenv", bin_ / "python3.12"):
        p.chmod(0o755)
    proc = subprocess.run(["/bin/bash", str(repo / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bin_), "HOME": str(tmp_path)})
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1 and "no Python 3.12 found" in proc.stderr, proc.stderr
    assert not (repo / ".venv").exists()


def test_readme_python_example_runs(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "runs" / "posterior.nc").is_file()


def _script(name: str) -> pathlib.Path:
    """``benchmarks/<name>.py``, or ``benchmarks/studies/<name>.py`` for a one-off study."""
    top = ROOT / "benchmarks" / f"{name}.py"
    return top if top.is_file() else ROOT / "benchmarks" / "studies" / f"{name}.py"


def _run_quick(script: str, results) -> dict:
    """Run ``benchmarks/<script>.py --quick`` into ``results``; return the JSON it wrote."""
    proc = subprocess.run([sys.executable, str(_script(script)), "--quick", "--results", str(results)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads((results / f"{script}.json").read_text())


@pytest.mark.slow
def test_quickstart_benchmark_quick(tmp_path):
    result = _run_quick("quickstart", tmp_path)
    assert set(result["runs"]["cold"]) == {"wall_seconds", "seconds", "test", "steps"}
    assert 0 < result["runs"]["cold"]["test"]["accuracy"] <= 1


@pytest.mark.slow
def test_backends_benchmark_quick(tmp_path):
    import bnnpp

    result = _run_quick("backends", tmp_path)
    assert {(r["data"], r["method"]) for r in result["rows"]} == {
        (d, m) for d in ("moons", "circles") for m in bnnpp.registered() if bnnpp.inference.get_method(m).unavailable is None
    }
    for r in result["rows"]:
        assert {"accuracy", "nll", "ece", "compile_seconds", "run_seconds", "throughput"} <= set(r)
        assert 0 <= r["accuracy"] <= 1


@pytest.mark.slow
def test_sweep_benchmark_quick(tmp_path):
    result = _run_quick("sweep", tmp_path)
    t = result["timing"]
    assert {"vmapped_seconds", "loop_seconds", "speedup", "fits", "max_nll_difference"} <= set(t)
    assert t["max_nll_difference"] < 1e-4  # vmapped and one-by-one fits are the same fits
    assert result["table"] and all(0 <= r["accuracy_mean"] <= 1 for r in result["table"])


@pytest.mark.slow
def test_vi_schedule_benchmark_quick(tmp_path):
    result = _run_quick("vi_schedule", tmp_path)
    assert {(r["method"], r["schedule"]) for r in result["classification"]} == {
        (m, s) for m in ("advi", "bbb") for s in ("constant", "cosine")
    }
    assert all(0 <= r["accuracy"] <= 1 and r["nll"] > 0 for r in result["classification"])
    assert result["uci"] == []  # --quick reads no UCI data


@pytest.mark.slow
def test_regression_benchmark_quick(tmp_path):
    result = _run_quick("regression", tmp_path)
    assert {r["method"] for r in result["rows"]} == {"bbb", "advi", "sgld", "nuts"}
    for r in result["rows"]:
        assert {"test_nll", "epistemic_ratio", "total_ratio", "epistemic_sd", "seconds"} <= set(r)
        assert r["epistemic_ratio"] > 0
    assert (tmp_path / "regression.png").stat().st_size > 0


@pytest.mark.slow
def test_speed_benchmark_quick(tmp_path):
    result = _run_quick("speed", tmp_path)
    assert set(result["moons"]) == {"bnnpp_advi", "numpyro_svi", "bnnpp_bbb", "hand_bbb"}
    rows = list(result["moons"].values()) + list((result["mnist"] or {}).values())
    for r in rows:
        assert {"import_seconds", "compile_seconds", "num_compiles", "run_seconds", "predict_seconds",
                "seconds_to_usable_posterior", "us_per_step", "accuracy"} <= set(r)
        assert (r["us_per_step"] is None or r["us_per_step"] > 0) and 0 <= r["accuracy"] <= 1
    assert result["mnist"] is not None or "MNIST skipped" in result["mnist_note"]
    assert {(r["width"], r["n"]) for r in result["steady"] if r["kind"] == "moons"} == {(5, 700), (50, 700), (5, 7000)}
    assert all({"bnnpp_bbb_us_per_step", "hand_bbb_us_per_step", "ratio"} <= set(r) for r in result["steady"])
    assert set(result["cli"]) == {"cold", "warm"}
    assert all({"wall_seconds", "compile_seconds"} <= set(r) for r in result["cli"].values())
    assert {"steady_step_moons", "usable_posterior_moons", "steady_step_scaling"} <= set(result["targets"])
    assert all("met" in t for t in result["targets"].values())
    assert (tmp_path / "speed.md").stat().st_size > 0 and (tmp_path / "speed.png").stat().st_size > 0


@pytest.mark.slow
def test_priors_grid_benchmark_quick(tmp_path):
    result = _run_quick("priors_grid", tmp_path)
    assert {(r["data"], r["hyperprior"]) for r in result["table"]} == {
        (d, h) for d in ("moons", "circles") for h in ("fixed", "inverse-gamma")
    }
    for r in result["nuts_reference"]:
        assert {"cell", "advi_accuracy", "accuracy_mean", "nll_mean", "divergences"} <= set(r)


@pytest.mark.slow
def test_ood_lenet_benchmark_quick(tmp_path):

    data = DATA_DIR
    if not (data / "mnist").is_dir():
        pytest.skip(f"MNIST IDX files not found in {data} (set BNNPP_DATA_DIR)")
    result = _run_quick("ood_lenet", tmp_path)
    assert set(result["rejected"]) == {"bbb", "map"}
    sets = {"MNIST test", "uniform noise", "gaussian noise"} | ({"Fashion-MNIST"} if (data / "fashion_mnist").is_dir() else set())
    for shares in result["rejected"].values():
        assert set(shares) == sets and all(0 <= v <= 1 for v in shares.values())
    for k in sets - {"MNIST test"}:
        assert 0 <= result["reports"]["bbb"]["ood"][k]["auroc_mutual_information"] <= 1
    assert (tmp_path / "ood_lenet_ood.png").stat().st_size > 0


@pytest.mark.slow
def test_probes_benchmark_quick(tmp_path):
    result = _run_quick("probes", tmp_path)
    assert set(result["chunk"]["us_per_step"]) == {"1", "10"}
    assert result["hash"]["bnnpp"]["distinct"] == 1  # the sorted ELBO gives one program for every hash seed
    assert len(result["sinusoid_init"]) == 3
    assert all(r["train_rmse"] > 0 and r["epistemic_ratio"] > 0 for r in result["sinusoid_init"])


@pytest.mark.slow
def test_uci_benchmark_quick(tmp_path):

    data = DATA_DIR
    if not (data / "uci" / "yacht").is_dir():
        pytest.skip(f"UCI sets not found in {data}/uci (set BNNPP_DATA_DIR)")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "uci.py"), "--quick", "--data-dir", str(data),
                           "--sets", "yacht", "--methods", "map,bbb", "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "uci.json").read_text())
    assert result["complete"] and {(r["set"], r["method"]) for r in result["rows"]} == {("yacht", "map"), ("yacht", "bbb")}
    for r in result["rows"]:
        assert len(r["per_split"]["test_ll"]) == 2 and np.isfinite(r["test_ll"]) and r["rmse"] > 0
        assert set(r["per_split"]["prior"]) <= set(r["val_ll"]) and len(r["val_ll"]) == 4  # 2 priors x 2 likelihoods
        assert set(r["per_split"]["likelihood"]) <= {"gaussian", "heteroscedastic"}
    assert result["verdict"]["yacht"]["method"] == "bbb"
    assert "MC dropout (pub.)" in (tmp_path / "uci.md").read_text()


@pytest.mark.slow
def test_sinusoid_optima_benchmark_quick(tmp_path):
    result = _run_quick("sinusoid_optima", tmp_path / "r")
    assert [r["start"] for r in result["rows"]] == ["default", "from MAP"]
    for r in result["rows"]:
        assert np.isfinite(r["negative_elbo"]) and r["test_nll"] > 0 and r["train_rmse"] > 0 and r["epistemic_ratio"] > 0


@pytest.mark.slow
def test_vi_defaults_benchmark_quick(tmp_path):
    result = _run_quick("vi_defaults", tmp_path / "r")
    assert len(result["classification"]) == 16 and all(0 <= r["accuracy"] <= 1 for r in result["classification"])
    assert result["sinusoid"] and all(r["epistemic_ratio"] > 0 for r in result["sinusoid"])


def test_uci_summary_takes_the_best_variational_row_on_the_standard_splits(tmp_path):
    """benchmarks/uci.py --summary: per set the best advi/bbb/vd row over the files, only rows
    fitted on the standard splits (20; 5 for protein), and the verdict counted against the
    published numbers; a file that is not uci.py's is refused."""

    def row(name, method, ll, k, lik="gaussian"):
        return {"set": name, "method": method, "splits": list(range(k)), "test_ll": ll, "test_ll_se": 0.01, "rmse": 1.0,
                "rmse_se": 0.1, "per_split": {"likelihood": [lik] * k}}

    a = {"benchmark": "uci", "protocol": "A", "rows": [row("wine", "advi", -0.95, 20), row("wine", "map", 0.0, 20),
                                                        row("protein", "bbb", -2.95, 5), row("yacht", "vd", -1.0, 5)]}
    b = {"benchmark": "uci", "protocol": "B", "rows": [row("wine", "bbb", -0.92, 20, "heteroscedastic"),
                                                        row("protein", "advi", -2.99, 5)]}
    for name, content in (("a", a), ("b", b), ("other", {"benchmark": "speed"})):
        (tmp_path / f"{name}.json").write_text(json.dumps(content))
    files = f"{tmp_path / 'a.json'},{tmp_path / 'b.json'}"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "uci.py"), "--summary", files, "--results", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((tmp_path / "out" / "uci_summary.json").read_text())
    assert set(s["best"]) == {"wine", "protein"}  # yacht's only row has 5 of 20 splits; map is not variational
    assert (s["best"]["wine"]["method"], s["best"]["wine"]["file"], s["best"]["wine"]["likelihoods"]) == ("bbb", "b.json", ["heteroscedastic"])
    assert s["best"]["protein"]["method"] == "bbb" and s["best"]["protein"]["protocol"] == "A"
    # published: wine VI -0.98, MC dropout -0.93; protein VI -2.99, MC dropout -2.89
    assert s["verdict"]["wine"] == {"method": "bbb", "test_ll": -0.92, "beats_vi": True, "beats_mc_dropout": True}
    assert (s["beats_vi"], s["beats_mc_dropout"], s["sets"]) == (2, 1, 2)
    assert "on 1 of 2" in (tmp_path / "out" / "uci_summary.md").read_text()
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "uci.py"), "--summary", str(tmp_path / "other.json"),
                          "--results", str(tmp_path / "out2")], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "not a result file of benchmarks/uci.py" in bad.stderr
    assert not (tmp_path / "out2").exists()


@pytest.mark.slow
def test_sinusoid_mixture_q_benchmark_quick(tmp_path):
    result = _run_quick("sinusoid_mixture_q", tmp_path / "r")
    assert [(r["family"], r["warmup"]) for r in result["rows"]] == [("gaussian", 0.0), ("mixture", 0.0), ("gaussian", 0.5), ("mixture", 0.5)]
    for r in result["rows"]:
        assert np.isfinite(r["negative_elbo"]) and r["test_nll"] > 0 and r["train_rmse"] > 0 and r["epistemic_ratio"] > 0
    assert set(result["rows"][1]["first_component_share"]) == {"dense_0.w", "dense_0.b", "dense_1.w", "dense_1.b", "dense_2.w", "dense_2.b"}


def test_every_top_level_benchmark_is_a_table_the_readme_cites():
    """benchmarks/ holds one script per user-facing table, each named in the README's Benchmarks
    table; one-off studies live in benchmarks/studies/."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Benchmarks"):]
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
    missing = [s for s in scripts if f"| `{s}` |" not in section]
    assert not missing, f"benchmarks not in the README's Benchmarks table: {missing} (add a row, or move a study to benchmarks/studies/)"
    for study in (ROOT / "benchmarks" / "studies").glob("*.py"):
        assert f"`{study.name}`" not in section.split("One-off studies")[0], study.name


def test_library_passes_the_linter():
    """`ruff check bnnpp` with the rules of pyproject.toml's [tool.ruff.lint]."""
    ruff = pytest.importorskip("ruff")
    from ruff.__main__ import find_ruff_bin

    proc = subprocess.run([find_ruff_bin(), "check", "--no-cache", "bnnpp"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    del ruff
