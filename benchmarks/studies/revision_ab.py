"""BBB and MAP seconds per epoch on MNIST 2×400 (scale mixture) at an earlier revision of the
whole library and at this checkout, alternating round by round on one machine.

Each round runs two fresh processes, one after the other: the baseline revision (a ``git
worktree`` of ``--baseline``, its own ``bnnpp`` and ``benchmarks/mnist_bbb.py``) and this
checkout; each times one BBB fit and one MAP fit of one epoch with ``mnist_bbb.timing`` (the
set-up of the 30-minute run's timing mode: prior cell, estimator, batches of 128, Adam 1e-3;
compilation excluded). Alternating rounds put both revisions under the same load; the ratios are
taken per process, so BBB and MAP of one row ran seconds apart.

    python benchmarks/studies/revision_ab.py --baseline eab92d8            # 5 rounds, ~4 minutes on 2 cores
    python benchmarks/studies/revision_ab.py --baseline eab92d8 --quick    # smoke run: 1 round on 2,560 images

Writes ``--out``/revision_ab.{json,md} (default benchmarks/studies/results).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCHMARKS)
from _common import default_data_dir, machine, write_results

# Run in a fresh interpreter with the revision's root first on sys.path, so that its bnnpp and
# its mnist_bbb are the ones imported (checked: bnnpp.__file__ must lie under the root).
_DRIVER = r"""
import json, os, sys
root, data_dir, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
sys.path[:0] = [root, os.path.join(root, "benchmarks")]
import bnnpp, mnist_bbb
assert os.path.realpath(bnnpp.__file__).startswith(os.path.realpath(root)), bnnpp.__file__
data = bnnpp.data.load("mnist", data_dir, normalize="126", flatten=True, validation=10000)
if quick:
    import dataclasses
    data = dataclasses.replace(data, x_train=data.x_train[:2560], y_train=data.y_train[:2560])
t = mnist_bbb.timing(mnist_bbb.build(), data, 1, 1, 0, gaussian=False)
print("RESULT " + json.dumps({k: v[0] for k, v in t["seconds_per_epoch"].items()}))
"""


def _run(root: str, data_dir: str, quick: bool) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, root, data_dir, "1" if quick else "0"], capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"revision_ab: the timing process at {root} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _markdown(r: dict) -> str:
    lines = [
        "# revision_ab", "",
        f"`{r['command']}`, {r['date']}; {r['machine']}.", "",
        (f"MNIST 2×400, scale mixture, batches of 128, one epoch per fit (compilation excluded); rounds alternate the "
         f"baseline {r['baseline']} and this checkout ({r['head']}), each a fresh process timing BBB then MAP."), "",
        "| round | revision | BBB s / epoch | MAP s / epoch | BBB / MAP | load (1 min) |", "|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(f"| {row['round']} | {row['revision']} | {row['bbb']:.2f} | {row['map']:.2f} | {row['ratio']:.2f} | {row['load']:.1f} |")
    lines += ["", "| revision | median BBB s / epoch | median MAP s / epoch | median BBB / MAP |", "|---|---|---|---|"]
    for name, s in r["summary"].items():
        lines.append(f"| {name} | {s['bbb']:.2f} | {s['map']:.2f} | {s['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision to compare against (a commit, tag or branch)")
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 5; quick 1)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round on the first 2,560 training images")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--out", "--results", dest="out", default=os.path.join(HERE, "results"), help="folder for revision_ab.{json,md}")
    args = ap.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)  # --rounds 0 is an error, not the default
    if rounds < 1:
        raise SystemExit("revision_ab: --rounds must be at least 1")
    data_dir = args.data_dir or default_data_dir()
    if not os.path.isdir(os.path.join(data_dir, "mnist")):
        raise SystemExit(f"revision_ab: no mnist/ folder under {data_dir}: pass --data-dir or set BNNPP_DATA_DIR")
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], check=True, capture_output=True, text=True).stdout.strip()
    try:
        base = git("rev-parse", "--short", f"{args.baseline}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"revision_ab: {args.baseline!r} is not a revision of this repository") from None
    head = git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "baseline")
        git("worktree", "add", "--detach", tree, base)
        try:
            for r in range(rounds):
                for name, root in ((base, tree), (head, ROOT)):
                    load = os.getloadavg()[0]
                    s = _run(root, data_dir, args.quick)
                    rows.append({"round": r + 1, "revision": name, "bbb": s["bbb"], "map": s["map"], "ratio": s["bbb"] / s["map"], "load": load})
                    print(f"round {r + 1}/{rounds} {name}: BBB {s['bbb']:.2f}, MAP {s['map']:.2f} s/epoch, ratio {s['bbb'] / s['map']:.2f}", flush=True)
        finally:
            git("worktree", "remove", "--force", tree)
    summary = {}
    for name in (base, head):
        mine = [row for row in rows if row["revision"] == name]
        summary[name] = {k: statistics.median(row[k] for row in mine) for k in ("bbb", "map", "ratio")}
    cmd = "python benchmarks/studies/revision_ab.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"command": cmd.strip(), "date": dt.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
              "baseline": base, "head": head, "rounds": rounds, "quick": args.quick, "rows": rows, "summary": summary}
    write_results(args.out, "revision_ab", result, _markdown(result))
    print(_markdown(result))
    return result


if __name__ == "__main__":
    main()
