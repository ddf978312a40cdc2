"""Compare a uci.py result file split by split with results/uci_20splits_small_hetero_advi.json (advi, 2026-11-25):
# python benchmarks/studies/uci_compare_splits.py RESULT.json   (prints a markdown table)"""

import json
import os
import sys

import numpy as np

old = {
    r["set"]: r
    for r in json.load(
        open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results", "uci_20splits_small_hetero_advi.json"))
    )["rows"]
}
new = {r["set"]: r for r in json.load(open(sys.argv[1]))["rows"]}
print(
    "| set | splits | before (2026-11-25): test LL, first 8 splits | now | Δ (now − before) ± se | RMSE before → now | hierarchical models chosen, before → now |"
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
