"""Choose a 2×1200 (or any) BBB configuration on the validation split, as Blundell et al. (2015)
did, from the records of ``mnist_bbb_drift.py``: a table of every record that ran its whole
schedule, and the configuration (every setting but the seed) with the lowest validation error
at the variational means after the last epoch, averaged over its seeds, with its test numbers.

Nothing is fitted; the test columns are shown, never used for the choice.

    python benchmarks/studies/mnist_bbb_choose.py RECORD.json ... [--md OUT.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

# the settings that make a configuration (a record without one, from before it existed, had its default)
CONFIG = {
    "prior": None,
    "hidden": None,
    "n_train": None,
    "epochs": None,
    "batch_size": 128,
    "lr": 1e-3,
    "schedule": "constant",
    "adam_eps": 1e-8,
    "rho_lr_factor": 1.0,
    "kl_weighting": "blundell",
    "estimator": "reparam",
    "init_scale": 0.05,
    "sigma_epochs": 0,
}


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def _row(path: str) -> dict | None:
    r = json.load(open(path))
    c, s = r["curve"], r["settings"]
    if len(c) < s["epochs"] or "final" not in r or c[-1].get("val_error_at_means") is None:
        return None  # stopped early, no final predictive or no validation split: not comparable
    prune = {(p["rule"], round(p["fraction"], 2)): p["test_error"] for p in r["final"].get("pruning", [])}
    config = tuple((k, _hashable(s.get(k) if s.get(k) is not None else d)) for k, d in CONFIG.items())
    return {
        "record": os.path.basename(path)[:-5],
        "seed": s.get("seed", 0),
        "config": config,
        "val": c[-1]["val_error_at_means"],
        "test_means": c[-1]["test_error_at_means"],
        "test_100": r["final"]["test_error_100_draws"],
        "snr95": prune.get(("snr", 0.95)),
        "mag95": prune.get(("magnitude", 0.95)),
    }


def choose(paths: list[str]) -> tuple[list[dict], dict]:
    """The comparable rows (see :func:`_row`) and the chosen configuration: ``{"config", "rows",
    "val", "test_100", "snr95"}`` (means over its seeds)."""
    rows = [r for r in map(_row, paths) if r is not None]
    if not rows:
        raise SystemExit("mnist_bbb_choose: no record ran its whole schedule with --final and a validation split")
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["config"], []).append(r)

    def mean(rs, key):
        vals = [r[key] for r in rs if r[key] is not None]
        return statistics.fmean(vals) if vals else None

    best = min(groups.values(), key=lambda rs: mean(rs, "val"))
    return rows, {"rows": best, "val": mean(best, "val"), "test_100": mean(best, "test_100"), "snr95": mean(best, "snr95")}


def markdown(rows: list[dict], chosen: dict) -> str:
    pct = lambda v: "–" if v is None else f"{v:.2%}"  # noqa: E731
    lines = [
        "| record | seed | validation error at the means, last epoch | test error at the means | predictive, 100 draws | "
        "95% pruned by SNR / by magnitude |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: r["val"]):
        lines.append(
            f"| {r['record']} | {r['seed']} | {pct(r['val'])} | {pct(r['test_means'])} | {pct(r['test_100'])} | "
            f"{pct(r['snr95'])} / {pct(r['mag95'])} |"
        )
    names = ", ".join(r["record"] for r in chosen["rows"])
    lines += [
        "",
        f"Chosen on validation (mean over seeds): {names} — validation {pct(chosen['val'])}, test error of the "
        f"predictive from 100 draws {pct(chosen['test_100'])}, 95% pruned by SNR {pct(chosen['snr95'])}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+")
    ap.add_argument("--md", default=None, help="write the table here too")
    args = ap.parse_args(argv)
    rows, chosen = choose(args.records)
    md = markdown(rows, chosen)
    print(md, end="")
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"`python benchmarks/studies/mnist_bbb_choose.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n\n" + md)
    return chosen


if __name__ == "__main__":
    main()
