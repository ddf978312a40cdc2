"""Compare a uci.py result file split by split with an earlier one, on the splits both have:
# python benchmarks/studies/uci_compare_splits.py RESULT.json [REFERENCE.json [METHOD]]   (prints a markdown table)
# REFERENCE defaults to results/uci_20splits_small_hetero_advi.json (advi, 2026-11-25); METHOD to the new file's."""

import json
import os
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
reference = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "results", "uci_20splits_small_hetero_advi.json")
new_rows = json.load(open(sys.argv[1]))["rows"]
method = sys.argv[3] if len(sys.argv) > 3 else new_rows[0]["method"]
before = json.load(open(reference))
old = {r["set"]: r for r in before["rows"] if r["method"] == method}
new = {r["set"]: r for r in new_rows if r["method"] == method}
print(f"{method}: {os.path.basename(sys.argv[1])} against {os.path.basename(reference)}\n")
print(
    f"| set | splits | before ({before.get('date')}): test LL, same splits | now | Δ (now − before) ± se | RMSE before → now | hierarchical models chosen, before → now |"
)
print("|---|---|---|---|---|---|---|")
for s, r in new.items():
    o = old[s]
    k = len(r["per_split"]["test_ll"])
    sp = r["splits"]
    a = np.array([o["per_split"]["test_ll"][o["splits"].index(i)] for i in sp])
    b = np.array(r["per_split"]["test_ll"])
    ra = np.mean([o["per_split"]["rmse"][o["splits"].index(i)] for i in sp])
    rb = np.mean(r["per_split"]["rmse"])
    d = b - a
    ha = sum("half_normal" in q for q in [o["per_split"]["prior"][o["splits"].index(i)] for i in sp])
    hb = sum("half_normal" in q for q in r["per_split"]["prior"])
    print(
        f"| {s} | {k} | {a.mean():.3f} | {b.mean():.3f} | {d.mean():+.3f} ± {d.std(ddof=1) / np.sqrt(k):.3f} | {ra:.2f} → {rb:.2f} | {ha} → {hb} of {k} |"
    )
