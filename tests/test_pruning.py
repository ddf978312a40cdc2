"""Weight pruning (bnnpp.pruning) on hand-built posteriors whose scores and predictions are
known exactly: SNR and magnitude from guide parameters and from draws, pooled cut-offs,
0% pruning changes nothing, 100% pruning makes the prediction independent of the input."""

from __future__ import annotations

import numpy as np
import pytest
from shared_data import DATA_DIR

from bnnpp import models, pruning
from bnnpp.introspection import latent_sites
from bnnpp.posterior import Posterior

IN, HID, C = 4, 3, 3


def _posterior(samples: dict, info: dict, x=None, y=None, hidden=(HID,)) -> Posterior:
    model = models.mlp(hidden, activation="relu", num_classes=C)
    x = np.zeros((1, IN), np.float32) if x is None else x
    y = np.zeros((len(x),), np.int32) if y is None else y
    return Posterior(samples, info, model, x, y, latent_sites(model, x, y))


def _vi_posterior(seed=0, draws=20):
    """A bbb-like posterior: guide loc/scale per site and draws from them."""
    rng = np.random.default_rng(seed)
    shapes = {"dense_0.w": (IN, HID), "dense_0.b": (HID,), "dense_1.w": (HID, C), "dense_1.b": (C,)}
    params, samples = {}, {}
    for k, shape in shapes.items():
        loc = rng.normal(0, 1, shape)
        scale = rng.uniform(0.05, 2.0, shape)
        params[f"{k}_loc"], params[f"{k}_scale"] = loc.astype(np.float32), scale.astype(np.float32)
        samples[k] = (loc + scale * rng.normal(size=(1, draws, *shape))).astype(np.float32)
    return _posterior(samples, {"method": "bbb", "guide_params": params})


def test_snr_and_magnitude_from_guide_params():
    post = _vi_posterior()
    gp = post.info["guide_params"]
    s, m = pruning.snr(post), pruning.magnitude(post)
    assert sorted(s) == ["dense_0.w", "dense_1.w"]  # weights only, biases are never pruned
    for site in s:
        np.testing.assert_allclose(s[site], np.abs(gp[f"{site}_loc"]) / gp[f"{site}_scale"], rtol=1e-6)
        np.testing.assert_allclose(m[site], np.abs(gp[f"{site}_loc"]), rtol=1e-6)


def test_snr_from_advi_names_and_from_draws():
    post = _vi_posterior()
    gp = post.info["guide_params"]
    advi = {k.replace("_loc", "_auto_loc").replace("_scale", "_auto_scale"): v for k, v in gp.items()}
    post_advi = _posterior(post.samples, {"method": "advi", "guide_params": advi})
    np.testing.assert_allclose(pruning.snr(post_advi)["dense_1.w"], pruning.snr(post)["dense_1.w"])
    # no guide parameters (MCMC): mean and sd over all chains' draws
    mcmc = {k: v.reshape(2, 10, *v.shape[2:]) for k, v in post.samples.items()}
    post_mcmc = _posterior(mcmc, {"method": "nuts"})
    d = post.samples["dense_0.w"][0].astype(np.float64)
    np.testing.assert_allclose(pruning.snr(post_mcmc)["dense_0.w"], np.abs(d.mean(0)) / d.std(0, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(pruning.magnitude(post_mcmc)["dense_0.w"], np.abs(d.mean(0)), rtol=1e-6)


def test_snr_ordering_on_hand_built_scores():
    """Entries with large |μ| but huge σ go first under SNR and last under magnitude."""
    post = _vi_posterior()
    gp = dict(post.info["guide_params"])
    n0, n1 = IN * HID, HID * C
    loc = np.arange(1, n0 + n1 + 1, dtype=np.float32)  # |μ| = 1..21, distinct
    scale = loc**2  # SNR = 1/|μ|: the reverse order
    gp["dense_0.w_loc"], gp["dense_1.w_loc"] = loc[:n0].reshape(IN, HID), loc[n0:].reshape(HID, C)
    gp["dense_0.w_scale"], gp["dense_1.w_scale"] = scale[:n0].reshape(IN, HID), scale[n0:].reshape(HID, C)
    post = _posterior(post.samples, {"method": "bbb", "guide_params": gp})
    total = n0 + n1
    k = round(0.5 * total)
    for rule, pruned_values in (("magnitude", loc[:k]), ("snr", loc[-k:])):
        p = pruning.prune(post, 0.5, rule)
        locs = np.concatenate([p.info["guide_params"]["dense_0.w_loc"].ravel(), p.info["guide_params"]["dense_1.w_loc"].ravel()])
        removed = loc[locs == 0]
        np.testing.assert_array_equal(np.sort(removed), np.sort(pruned_values))  # pooled across both layers
        assert p.info["pruning"] == {"fraction": 0.5, "rule": rule, "removed": k, "remaining": total - k}
        zero = np.concatenate([(p.samples[s] == 0).all(axis=(0, 1)).ravel() for s in ("dense_0.w", "dense_1.w")])
        np.testing.assert_array_equal(zero, locs == 0)  # every draw zero exactly where the loc is
        np.testing.assert_array_equal(p.samples["dense_0.b"], post.samples["dense_0.b"])  # biases kept
    assert (post.info["guide_params"]["dense_0.w_loc"] != 0).all()  # the input is not changed


def test_prune_zero_leaves_predictions_unchanged():
    post = _vi_posterior()
    x = np.random.default_rng(1).normal(size=(50, IN)).astype(np.float32)
    before = post.predict(x).probs
    for rule in pruning.RULES:
        after = pruning.prune(post, 0.0, rule)
        assert after.info["pruning"]["removed"] == 0
        np.testing.assert_array_equal(after.predict(x).probs, before)


def test_prune_all_by_magnitude_gives_chance_accuracy():
    """With every weight zero the logits are relu(b0)·0 + b1 = b1: the same class for every
    input, so accuracy is that class's share — 1/C on balanced labels."""
    post = _vi_posterior(draws=20)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, IN)).astype(np.float32)
    y = np.tile(np.arange(C), 20)  # balanced: 20 of each class
    pruned = pruning.prune(post, 1.0, "magnitude")
    probs = pruned.predict(x).probs
    np.testing.assert_allclose(probs, np.broadcast_to(probs[:, :1], probs.shape), atol=1e-7)  # no dependence on x
    assert np.mean(probs.mean(0).argmax(-1) == y) == pytest.approx(1 / C)
    rows = pruning.pruning_table(post, x, y, fractions=(0, 1.0), rules=("magnitude",), num_samples=10)
    assert [r["remaining"] for r in rows] == [IN * HID + HID * C, 0]
    assert rows[1]["test_error"] == pytest.approx(1 - 1 / C)
    base = post.predict(x, num_samples=10).probs.mean(0).argmax(-1)
    assert rows[0]["test_error"] == pytest.approx(np.mean(base != y))  # 0% = the unpruned error


def test_pruning_a_linearised_laplace_changes_its_predictions():
    """The linearised predictive is built from the MAP, which pruning leaves alone: a pruned
    laplace posterior predicts from its pruned draws instead (it was unchanged by pruning)."""
    import dataclasses

    import bnnpp
    from bnnpp import priors

    data = bnnpp.data.moons(n=200)
    net = models.mlp((5,), num_classes=2, prior=priors.normal(1.0))
    post = bnnpp.fit(net, data, method="laplace", num_steps=200, num_samples=20, progress=False)
    assert post.stats.options["predictive"] == "linearised"
    x = data.x_test[:50]
    kept = pruning.prune(post, 0.0)
    assert kept.stats.extras["pruning"]["predictive"] == "mc" and post.stats.options["predictive"] == "linearised"
    mc = dataclasses.replace(post, stats=dataclasses.replace(post.stats, options={**post.stats.options, "predictive": "mc"}))
    np.testing.assert_allclose(kept.predict(x).mean, mc.predict(x).mean, rtol=1e-6)  # nothing pruned: laplace's mc predictive
    none = pruning.prune(post, 1.0)
    probs = none.predict(x).mean  # every weight zero: the output is the biases alone, the same for every x
    np.testing.assert_allclose(probs, np.broadcast_to(probs[:1], probs.shape), atol=1e-6)
    assert not np.allclose(probs, post.predict(x).mean, atol=1e-3)


def test_map_posterior_has_no_snr():
    rng = np.random.default_rng(3)
    shapes = {"dense_0.w": (IN, HID), "dense_0.b": (HID,), "dense_1.w": (HID, C), "dense_1.b": (C,)}
    post = _posterior({k: rng.normal(size=(1, 1, *s)).astype(np.float32) for k, s in shapes.items()}, {"method": "map"})
    with pytest.raises(ValueError, match="rule='magnitude'"):
        pruning.snr(post)
    with pytest.raises(ValueError, match="rule='magnitude'"):
        pruning.pruning_table(post, np.zeros((2, IN), np.float32), np.zeros(2, int))
    p = pruning.prune(post, 0.25, "magnitude")
    assert p.info["pruning"]["removed"] == round(0.25 * (IN * HID + HID * C))


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan"), True, "50"])
def test_bad_fraction(fraction):
    with pytest.raises(ValueError, match=r"fraction must be a number in \[0, 1\]"):
        pruning.prune(_vi_posterior(), fraction)


def test_bad_rule_and_input():
    post = _vi_posterior()
    with pytest.raises(ValueError, match="rule must be one of snr, magnitude"):
        pruning.prune(post, 0.5, "random")
    with pytest.raises(ValueError, match="rule must be one of"):
        pruning.pruning_table(post, np.zeros((2, IN), np.float32), np.zeros(2, int), rules=("l1",))
    with pytest.raises(TypeError, match="Posterior"):
        pruning.snr({"dense_0.w": np.zeros((1, 1, 2, 2))})
    with pytest.raises(ValueError, match="y_test"):
        pruning.pruning_table(post, np.zeros((2, IN), np.float32), np.zeros(3, int))


def test_table_markdown_layout():
    rows = [
        {"rule": r, "fraction": f, "removed": round(f * 2_395_200), "remaining": 2_395_200 - round(f * 2_395_200), "test_error": e}
        for r, errs in (("snr", (0.0124, 0.0129)), ("magnitude", (0.0124, 0.0150)))
        for f, e in zip((0.0, 0.95), errs, strict=True)
    ]
    md = pruning.table_markdown(rows).splitlines()
    assert md[0] == "| proportion removed | # weights | test error (SNR) | test error (magnitude) |"
    assert md[2] == "| 0% | 2.4m | 1.24% | 1.24% |"
    assert md[3] == "| 95% | 120k | 1.29% | 1.50% |"  # as Blundell et al.'s Table 2 writes the counts
    assert all(line.count("|") == 5 for line in md)


@pytest.mark.slow  # about 2 minutes on an idle 2-core CPU: six BBB/MAP fits on the 50,000 MNIST images
def test_mnist_bbb_benchmark_quick(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    data = DATA_DIR
    if not (data / "mnist").is_dir():
        pytest.skip(f"MNIST IDX files not found in {data} (set BNNPP_DATA_DIR)")
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "mnist_bbb.py"), "--quick", "--data-dir", str(data), "--out", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "mnist_bbb.json").read_text())
    assert r["mode"] == "quick" and r["timing"]["ratio_bbb_over_map"] > 0
    assert len(r["training"]["curve"]) == r["training"]["epochs"] == 2
    assert {(row["rule"], row["fraction"]) for row in r["pruning"]} == {(k, f) for k in pruning.RULES for f in (0, 0.25, 0.5, 0.75, 0.95, 0.98)}
    assert 0 < r["training"]["test_error_10_draws"] < 0.2
    assert 0 < r["training"]["test_error_100_draws"] < 0.2
    assert (tmp_path / "mnist_bbb.md").read_text().startswith("# mnist_bbb (quick)")


@pytest.mark.slow  # about 1 minute: three BBB fits on 2,560 MNIST images
def test_mnist_bbb_variants_quick(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    data = DATA_DIR
    if not (data / "mnist").is_dir():
        pytest.skip(f"MNIST IDX files not found in {data} (set BNNPP_DATA_DIR)")
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "mnist_bbb.py"), "--variants", "--quick", "--data-dir", str(data), "--out", str(tmp_path)],
        check=False, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "mnist_bbb_variants.json").read_text())
    assert [row["variant"] for row in r["rows"]] == ["baseline", "Gaussian prior N(0, 1)", "pixels standardised"]
    for row in r["rows"]:
        assert {"test_error_10_draws", "test_nll_10_draws", "settings", "run_seconds"} <= set(row)
        assert 0 < row["test_error_10_draws"] < 0.9  # 1 epoch on 2,560 images: better than chance (0.9)
    assert r["rows"][1]["settings"]["mixture"] is None and r["rows"][2]["settings"]["normalize"] == "standardize"
    assert not (tmp_path / "mnist_bbb.json").exists()


def _mnist_bbb_module():
    """benchmarks/mnist_bbb.py as a module (the benchmarks folder is not a package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("mnist_bbb", Path(__file__).resolve().parents[1] / "benchmarks" / "mnist_bbb.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mnist_bbb_variant_list_is_the_papers_grid():
    mod = _mnist_bbb_module()
    full = [c["mixture"] for _, c in mod.variant_list(full=True) if c.get("mixture")]
    assert sorted(full + [(0.5, 0, 6)]) == sorted((p, a, b) for p in (0.25, 0.5, 0.75) for a in (0, 1, 2) for b in (6, 7, 8))
    cpu = [c["mixture"] for _, c in mod.variant_list(full=False) if c.get("mixture")]
    assert len(cpu) == 6 and all(sum(x != y for x, y in zip(c, (0.5, 0, 6), strict=True)) == 1 for c in cpu)


def test_mnist_bbb_variant_selection():
    """--only keeps the rows whose label contains the text, --mixture adds cells, --estimator
    sets every row's estimator; a malformed cell is a one-line argparse error."""
    import argparse

    mod = _mnist_bbb_module()
    args = argparse.Namespace(full=False, only=["baseline"], mixture=[(0.75, 0, 8)], estimator="reparam")
    rows = mod.selected_variants(args)
    assert [label for label, _ in rows] == [
        "baseline [reparam]", "baseline, seed 1 [reparam]", "mixture π=0.75, −log σ1=0, −log σ2=8 [reparam]",
    ]
    assert all(change["estimator"] == "reparam" for _, change in rows) and rows[2][1]["mixture"] == (0.75, 0, 8)
    assert mod.BASELINE_VARIANT["estimator"] == "local"  # the ablations' reference is unchanged
    assert mod._parse_cell(" 0.25, 1 ,7") == (0.25, 1, 7)
    with pytest.raises(argparse.ArgumentTypeError, match="PI,A,B"):
        mod._parse_cell("0.75,8")
    with pytest.raises(SystemExit, match="no variant label"):
        mod.selected_variants(argparse.Namespace(full=False, only=["nothing like it"], mixture=None, estimator=None))


def test_mnist_bbb_choose_cell_takes_the_lowest_validation_error(tmp_path):
    """--choose-from: the scale-mixture row with the lowest validation error; the Gaussian-prior
    row and rows without a validation error are skipped; no usable row is a one-line exit."""
    import json

    mod = _mnist_bbb_module()
    rows = [
        {"variant": "Gaussian", "settings": {"mixture": None}, "validation_error_10_draws": 0.010},
        {"variant": "a", "settings": {"mixture": [0.5, 0, 6]}, "validation_error_10_draws": 0.030},
        {"variant": "b", "settings": {"mixture": [0.25, 1, 7]}, "validation_error_10_draws": 0.020},
        {"variant": "old", "settings": {"mixture": [0.75, 0, 8]}},
    ]
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"rows": rows}))
    assert mod.choose_cell(str(path))["variant"] == "b"
    path.write_text(json.dumps({"rows": rows[:1]}))
    with pytest.raises(SystemExit, match="no scale-mixture row"):
        mod.choose_cell(str(path))


@pytest.mark.slow  # about a minute on a loaded 2-core CPU: compiles one BBB epoch, the pruning table and a slower-rho variant
def test_mnist_bbb_drift_records_every_epoch(tmp_path):
    """benchmarks/studies/mnist_bbb_drift.py with tiny arguments: one record per epoch with the per-layer
    statistics, the final predictive and pruning table, and the same with a separate ρ rate."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    data = DATA_DIR
    if not (data / "mnist").is_dir():
        pytest.skip(f"MNIST IDX files not found in {data} (set BNNPP_DATA_DIR)")
    script = str(root / "benchmarks" / "studies" / "mnist_bbb_drift.py")
    common = ["--n-train", "256", "--n-test", "200", "--hidden", "8", "8", "--epochs", "2", "--data-dir", str(data), "--out", str(tmp_path)]
    for extra in (["--label", "a", "--final"], ["--label", "b", "--rho-lr-factor", "0.1"]):
        proc = subprocess.run([sys.executable, script, *extra, *common], check=False, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
    a = json.loads((tmp_path / "a.json").read_text())
    assert [c["epoch"] for c in a["curve"]] == [1, 2]
    layers = a["curve"][-1]["layers"]
    assert set(layers) == {f"dense_{i}.{p}" for i in range(3) for p in "wb"}
    assert 0 <= layers["dense_1.w"]["units_off"] <= 1 and layers["dense_0.w"]["sigma_median"] > 0
    assert {(r["rule"], r["fraction"]) for r in a["final"]["pruning"]} == {(k, f) for k in pruning.RULES for f in (0, 0.5, 0.75, 0.95, 0.98)}
    assert 0 < a["final"]["test_error_100_draws"] < 1
    assert len(json.loads((tmp_path / "b.json").read_text())["curve"]) == 2
