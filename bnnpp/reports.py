"""Markdown rendering of every report bnnpp writes: ``compare.md``, ``sweep.md``,
``evaluation.md`` and ``prune.md`` (with the published pruning tables beside ours).

Each function takes the JSON-safe dict (or rows) that is also written as ``.json`` and returns
the Markdown text, ending in a newline: the comparison and the image evaluation as their typed
records (:mod:`bnnpp.records`; their dicts are read into one). This module imports only
:mod:`bnnpp.records`, so any module may use it.
"""

from __future__ import annotations

from collections.abc import Sequence

from bnnpp.records import ABSENT, CompareResult, EvaluationReport

__all__ = [
    "PUBLISHED_PRUNING",
    "compare_markdown",
    "evaluation_markdown",
    "prune_markdown",
    "pruning_table_markdown",
    "published_pruning_markdown",
    "reference_markdown",
    "sweep_markdown",
    "table_evaluation_markdown",
]


def _fmt(v, spec: str = ".3f") -> str:
    """A table cell: ``—`` for None, yes/no for booleans, else ``format(v, spec)``."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return format(v, spec)


def compare_markdown(results: CompareResult | dict) -> str:
    """``compare.md``: the metrics table, the agreement with the reference posterior (when
    there is one) and the LOO ranking of :func:`bnnpp.compare.compare_methods`'s results."""
    if not isinstance(results, CompareResult):
        results = CompareResult.from_json(results)
    regression = results.task == "regression"
    lines = [f"# bnnpp compare: {results.data}, seed {results.seed}", ""]
    if regression:
        lines += [
            "| method | RMSE | NLL | 95% coverage | mean sd | mean epistemic sd | max R-hat | min ESS | PSIS k̂ | LOO elpd ± se | seconds |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| method | accuracy | NLL | Brier | ECE | mean entropy | mean MI | max R-hat | min ESS | PSIS k̂ | LOO elpd ± se | seconds |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for m, r in results.methods.items():
        loo = "—" if r["loo_elpd"] is None else f"{r['loo_elpd']:.1f} ± {r['loo_se']:.1f}"
        scores = (
            f"{_fmt(r['rmse'])} | {_fmt(r['nll'])} | {_fmt(r['coverage_95'])} | {_fmt(r['mean_sd'])} | {_fmt(r['mean_epistemic_sd'])}"
            if regression
            else f"{_fmt(r['accuracy'])} | {_fmt(r['nll'])} | {_fmt(r['brier'])} | {_fmt(r['ece'])} | "
            f"{_fmt(r['mean_entropy'])} | {_fmt(r['mean_mutual_information'])}"
        )
        lines.append(
            f"| {m} | {scores} | {_fmt(r['max_r_hat'])} | "
            f"{_fmt(r['min_ess_bulk'], '.0f')} | {_fmt(r['psis_khat'], '.2f')} | {loo} | {_fmt(r['seconds'], '.1f')} |"
        )
    lines += [
        "",
        (
            "max R-hat and min ESS are over the permutation-invariant quantities (layer scales and the predictive "
            f"{'means' if regression else 'probabilities'} at 20 test inputs); R-hat needs ≥ 2 chains (nuts, sgld). "
            "PSIS k̂ (VI only, Yao et al. 2018): < 0.5 good, 0.5–0.7 usable, > 0.7 the approximation is not "
            "trustworthy. LOO elpd from PSIS-LOO on the training data (higher is better)."
        ),
    ]
    if results.reference:
        lines += reference_markdown(results)
    if results.ranking:
        lines += [
            "",
            "## az.compare (PSIS-LOO)",
            "",
            "| rank | method | elpd_loo | elpd_diff | dse | weight | p_loo | LOO reliable |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in results.ranking:
            reliable = "—" if "unreliable" not in r else (f"**no**: k̂ > 0.7 for {r['khat_above_0.7']}" if r["unreliable"] else "yes")
            lines.append(
                f"| {r['rank']} | {r['method']} | {r['elpd_loo']:.1f} | {r['elpd_diff']:.1f} | {r['dse']:.1f} | "
                f"{r['weight']:.2f} | {r['p_loo']:.1f} | {reliable} |"
            )
        unreliable = [r["method"] for r in results.ranking if r.get("unreliable")]
        if unreliable:
            lines += [
                "",
                (
                    f"**This ranking is unreliable**: {', '.join(unreliable)} "
                    f"{'has' if len(unreliable) == 1 else 'have'} observations with Pareto k̂ > 0.7, whose "
                    "LOO terms cannot be trusted (Vehtari et al. 2017; an ensemble's few members are too few draws "
                    "for Pareto smoothing). Compare on the test scores above."
                ),
            ]
    return "\n".join(lines) + "\n"


def reference_markdown(results: CompareResult | dict) -> list[str]:
    """The "agreement with the reference posterior" section of ``compare.md`` (lines)."""
    if not isinstance(results, CompareResult):
        results = CompareResult.from_json(results)
    ref = results.reference
    opts = ", ".join(f"{k}={v}" for k, v in ref.get("options", {}).items())
    verdict = "converged" if ref["converged"] else "NOT converged (R-hat ≥ 1.01): read the agreement with care"
    lines = [
        "",
        f"## Agreement with the reference posterior ({ref['method']}: {opts})",
        "",
        (
            f"Reference: {ref['num_chains']} chains × {ref['num_draws']} draws, max R-hat {_fmt(ref['max_r_hat'])}, "
            f"min ESS {_fmt(ref['min_ess_bulk'], '.0f')}, divergences {_fmt(ref['divergences'], 'd')} — {verdict}."
        ),
        "",
    ]
    if ref.get("cache_file"):
        how = "loaded from the cache" if ref.get("from_cache") else "fitted and cached"
        lines += [f"The reference was {how}: `{ref['cache_file']}` (delete the file to refit it).", ""]
    if results.task == "regression":
        lines += ["| method | W2 to reference | sd ratio | epistemic sd ratio |", "|---|---|---|---|"]
        for m, r in results.methods.items():
            lines.append(f"| {m} | {_fmt(r.get('ref_w2'))} | {_fmt(r.get('ref_sd_ratio'))} | {_fmt(r.get('ref_epistemic_sd_ratio'))} |")
        lines += [
            "",
            (
                "W2: the 2-Wasserstein distance between the predictive marginals at each test input (target units), "
                "mean over inputs. sd ratios: geometric mean over inputs of sd / the reference's; 1 is right, below 1 "
                "overconfident (Izmailov et al. 2021 measure approximations against HMC this way)."
            ),
        ]
    else:
        lines += ["| method | top-1 agreement | total variation |", "|---|---|---|"]
        for m, r in results.methods.items():
            lines.append(f"| {m} | {_fmt(r.get('ref_agreement'))} | {_fmt(r.get('ref_total_variation'))} |")
        lines += [
            "",
            (
                "Top-1 agreement: share of test inputs where the method's and the reference's predictive "
                "distributions pick the same class; total variation: ½ Σ|p − p_ref| of the predictive probabilities, "
                "mean over test inputs (Izmailov et al. 2021, sec. 5). Agreement 1 and TV 0 are exact."
            ),
        ]
    return lines


def sweep_table(table) -> list[str]:
    """The rows of :func:`bnnpp.sweep.summarise` as Markdown table lines (header first): test
    accuracy and NLL, mean ± sd over seeds; a ``fixed`` row names its best scale."""
    lines = ["| data | weight prior | hyperprior | test accuracy | test NLL |", "|---|---|---|---|---|"]
    for r in sorted(table, key=lambda r: (r["data"], r["weight_prior"], r["hyperprior"])):
        hp = r["hyperprior"] + (f" (best: {r['scale']:g})" if r["scale"] is not None else "")
        lines.append(
            f"| {r['data']} | {r['weight_prior']} | {hp} | {r['accuracy_mean']:.3f} ± {r['accuracy_sd']:.3f} | "
            f"{r['nll_mean']:.3f} ± {r['nll_sd']:.3f} |"
        )
    return lines


def sweep_markdown(table: list[dict], meta: dict) -> str:
    """``sweep.md``: one row per (data, weight prior, hyperprior) of :func:`bnnpp.sweep.summarise`'s
    table; ``meta`` gives ``method``, ``seeds``, ``runs``, ``seconds`` and ``vmap``."""
    lines = [
        (
            f"# bnnpp sweep: {meta['method']}, seeds {meta['seeds']}, {meta['runs']} fits in {meta['seconds']:.0f} s "
            f"({'vmapped groups' if meta['vmap'] else 'one by one'})"
        ),
        "",
        *sweep_table(table),
    ]
    lines += ["", "mean ± sd over seeds; 'fixed' rows show the scale of the grid with the best mean test accuracy."]
    return "\n".join(lines) + "\n"


def evaluation_markdown(report: EvaluationReport | dict) -> str:
    """``evaluation.md``: the test-set and out-of-distribution tables and the listed images of
    a report of :func:`bnnpp.evaluation.evaluate` (with ``run_dir``, ``data`` and ``skipped``
    when :func:`bnnpp.runs.evaluate_run` made it)."""
    if not isinstance(report, EvaluationReport):
        report = EvaluationReport.from_json(report)
    t = report.test
    lines = [
        f"# Evaluation of {'a posterior' if report.run_dir is ABSENT else report.run_dir}",
        "",
        f"{report.num_samples} posterior draws per prediction; reject when max class probability < τ = {report.tau:g}.",
        "",
        "| test set | n | error | NLL | Brier | ECE | rejected | mean entropy | mean MI |",
        "|---|---|---|---|---|---|---|---|---|",
        (
            f"| {'test' if report.data is ABSENT else report.data} | {t['n']} | {t['error']:.2%} | {t['nll']:.4f} | {t['brier']:.4f} | {t['ece']:.4f} | "
            f"{t['rejected']:.2%} | {t['mean_entropy']:.4f} | {t['mean_mutual_information']:.4f} |"
        ),
        "",
    ]
    lines += selective_markdown(report.selective, "accuracy")
    if report.ood:
        lines += [
            "| out of distribution | n | rejected | mean entropy | mean MI | AUROC entropy | AUROC MI |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, o in report.ood.items():
            lines.append(
                f"| {name} | {o['n']} | {o['rejected']:.2%} | {o['mean_entropy']:.4f} | {o['mean_mutual_information']:.4f} | "
                f"{o['auroc_entropy']:.4f} | {o['auroc_mutual_information']:.4f} |"
            )
        lines.append("")
    if report.shift:
        lines += [
            f"Under dataset shift (the first {report.shift['n']} test images; Ovadia et al. 2019):",
            "",
            "| shift | level | accuracy | ECE | NLL | mean entropy | mean MI |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['shift']} | {r['level']:g} | {r['accuracy']:.4f} | {r['ece']:.4f} | {r['nll']:.4f} | {r['mean_entropy']:.4f} | "
            f"{r['mean_mutual_information']:.4f} |"
            for r in report.shift["rows"]
        ]
        lines.append("")
    for key, label in (
        ("sure_but_wrong", "Misclassified images the model was surest of"),
        ("lowest_confidence", "Lowest-confidence images"),
    ):
        lines += [f"{label} (test index: label → predicted, expected error rate):", ""]
        lines += [f"- {e['index']}: {e['label']} → {e['predicted']}, {e['expected_error_rate']:.4f}" for e in t[key]] or ["- none"]
        lines.append("")
    if report.skipped:
        lines += [f"Skipped: {'; '.join(report.skipped)}", ""]
    lines.append(f"Figures: {', '.join(report.figures)}")
    return "\n".join(lines) + "\n"


def selective_markdown(selective: dict | None, score: str) -> list[str]:
    """Lines of the selective-prediction table (:func:`bnnpp.evaluation.selective_prediction`):
    per uncertainty measure the area under the score–coverage curve and the score at each
    coverage; empty without one."""
    if not selective:
        return []
    levels = list(next(iter(selective.values()))["at"])
    better = "higher" if score == "accuracy" else "lower"
    lines = [
        f"Selective prediction: {score} of the inputs kept when the most uncertain are refused ({better} is better; "
        "area: mean over every coverage; oracle: refusing by the true loss).",
        "",
        "| uncertainty measure | area | " + " | ".join(f"{score} at {c}" for c in levels) + " |",
        "|---|---|" + "---|" * len(levels),
    ]
    for name, r in selective.items():
        label = f"{name} (constant: index order)" if r.get("constant") and name != "oracle" else name
        lines.append(f"| {label} | {r['area']:.4g} | " + " | ".join(f"{r['at'][c]:.4g}" for c in levels) + " |")
    return [*lines, ""]


def table_evaluation_markdown(report: dict) -> str:
    """``evaluation.md`` of a table run (:func:`bnnpp.runs.evaluate_table_run`): its scores on
    the rows evaluated, one table row."""
    t = report["test"]
    if report["task"] == "classification":
        head = "| rows | n | accuracy | NLL | Brier | ECE | mean entropy | mean MI |"
        row = (
            f"| {report['data']} | {t['n']} | {t['accuracy']:.4f} | {t['nll']:.4f} | {t['brier']:.4f} | {t['ece']:.4f} | "
            f"{t['mean_entropy']:.4f} | {t['mean_mutual_information']:.4f} |"
        )
    else:
        head = "| rows | n | RMSE | NLL | 95% coverage | mean sd | mean epistemic sd |"
        row = (
            f"| {report['data']} | {t['n']} | {_fmt(t['rmse'], '.4g')} | {t['nll']:.4f} | {t['coverage_95']:.3f} | "
            f"{_fmt(t['mean_sd'], '.4g')} | {_fmt(t['mean_epistemic_sd'], '.4g')} |"
        )
    return "\n".join(
        [
            f"# Evaluation of {report['run_dir']} ({report['method']})",
            "",
            f"{report['num_samples']} posterior draws per prediction; regression scores in the target's units.",
            "",
            head,
            "|" + "---|" * (head.count("|") - 1),
            row,
            "",
            *selective_markdown(report.get("selective"), "accuracy" if report["task"] == "classification" else "rmse"),
            f"Figures: {', '.join(report.get('figures', [])) or 'none'}.",
            "",
        ]
    )


def _count(n: int) -> str:
    """Weight counts as in Blundell et al.'s Table 2: 2.4m, 120k, 48k, 950."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}m"
    if n >= 10_000:
        return f"{n / 1e3:.0f}k"
    return f"{n:,}"


RULE_LABELS = {"snr": "SNR", "magnitude": "magnitude"}  # no "|" inside a Markdown table cell


def pruning_table_markdown(rows: Sequence[dict]) -> str:
    """The rows of :func:`bnnpp.pruning.pruning_table` as a Markdown table in the layout of
    Blundell et al. (2015) Table 2 — "Proportion removed | # weights | test error" — with one
    test-error column per rule, side by side (as Singh's reproduction compares naive and SNR
    pruning).

    Returns:
        The table, one line per fraction, ending in a newline.
    """
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    fractions = list(dict.fromkeys(r["fraction"] for r in rows))
    by = {(r["rule"], r["fraction"]): r for r in rows}
    head = "| proportion removed | # weights | " + " | ".join(f"test error ({RULE_LABELS[r]})" for r in rules) + " |"
    lines = [head, "|---" * (2 + len(rules)) + "|"]
    for f in fractions:
        first = next(by[(r, f)] for r in rules if (r, f) in by)
        errors = [f"{by[(r, f)]['test_error']:.2%}" if (r, f) in by else "" for r in rules]
        lines.append(f"| {f * 100:g}% | {_count(first['remaining'])} | " + " | ".join(errors) + " |")
    return "\n".join(lines) + "\n"


#: Published pruning tables, for the side-by-side comparison in prune.md (test error in %).
PUBLISHED_PRUNING = {
    "Blundell et al. 2015, Table 2 (2×1200, scale mixture, SNR)": {
        "weights": {0: "2.4m", 50: "1.2m", 75: "600k", 95: "120k", 98: "48k"},
        "SNR": {0: 1.24, 50: 1.24, 75: 1.24, 95: 1.29, 98: 1.39},
    },
    "Singh's reproduction, Table 1 (2×400, scale mixture)": {
        "magnitude": {0: 2.03, 25: 2.41, 50: 5.33, 75: 30.67, 95: 63.11},
        "SNR": {0: 2.03, 25: 2.59, 50: 5.89, 75: 41.05, 95: 82.50},
    },
}


def published_pruning_markdown() -> str:
    """:data:`PUBLISHED_PRUNING` as one Markdown table per source, each preceded by its title."""
    lines = []
    for title, table in PUBLISHED_PRUNING.items():
        cols = [k for k in table if k != "weights"]
        pcts = sorted({p for k in cols for p in table[k]})
        has_w = "weights" in table
        lines += [f"{title}:", ""]
        lines.append("| proportion removed |" + (" # weights |" if has_w else "") + "".join(f" test error ({c}) |" for c in cols))
        lines.append("|---" * (1 + has_w + len(cols)) + "|")
        for p in pcts:
            w = f" {table['weights'].get(p, '')} |" if has_w else ""
            lines.append(f"| {p}% |{w}" + "".join(f" {table[c][p]:.2f}% |" if p in table[c] else " |" for c in cols))
        lines.append("")
    return "\n".join(lines)


def prune_markdown(report: dict, note: str | None = None) -> str:
    """``prune.md``: the pruning table of a :func:`bnnpp.runs.prune_run` report (``run_dir``,
    ``data``, ``method``, ``num_weights``, ``num_samples``, ``rows``) beside the published
    ones, then ``note`` (e.g. why there is no SNR figure) when given."""
    md = [
        f"# Pruning of {report['run_dir']}",
        "",
        (
            f"{report['data']}, {report['method']}: {report['num_weights']:,} weights (biases are kept), pooled over layers; "
            f"test error of the mean prediction over {report['num_samples']} posterior draws."
        ),
        "",
        pruning_table_markdown(report["rows"]).rstrip("\n"),
        "",
        "Published, for comparison:",
        "",
        published_pruning_markdown(),
    ]
    if note:
        md.append(note)
    return "\n".join(md).rstrip("\n") + "\n"
