"""The README's moons demo, timed: ``bnnpp --help``, cold start (empty compilation cache) and
warm start.

Runs ``bnnpp --help`` (``--help-repeats`` times; the median is reported) and ``bnnpp fit
--data moons --out DIR`` in fresh processes exactly as a user would, and records the wall
time of each command, the time split that the fit itself reports (import, compile, fit,
predict, write) and the test accuracy. The machine's load average is recorded beside them:
on a shared machine every wall time stretches with it.

    python benchmarks/quickstart.py            # cold + warm, writes results/quickstart.{json,md}
    python benchmarks/quickstart.py --quick    # cold only, into --results (used by a smoke test)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
COMMAND = ["bnnpp", "fit", "--data", "moons", "--out"]


def run_once(out: str, cache: str) -> dict:
    """One demo run in a new process; returns wall seconds and the metrics it wrote."""
    env = {**os.environ, "BNNPP_CACHE_DIR": cache}
    cmd = [sys.executable, "-m", "bnnpp", *COMMAND[1:], out, "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"demo failed:\n{proc.stderr}")
    with open(os.path.join(out, "metrics.json")) as f:
        report = json.load(f)
    return {"wall_seconds": wall, "seconds": report["seconds"], "test": report["test"], "steps": report["steps_run"]}


def time_help(repeats: int) -> dict:
    """Wall seconds of ``bnnpp --help`` in ``repeats`` fresh processes: median and max."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "bnnpp", "--help"], capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0 or "fit" not in proc.stdout:
            raise SystemExit(f"bnnpp --help failed:\n{proc.stderr}")
    times.sort()
    return {"median_seconds": times[len(times) // 2], "max_seconds": times[-1], "repeats": repeats}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="cold run only")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for quickstart.{json,md}")
    ap.add_argument("--help-repeats", type=int, default=5, help="fresh processes timing `bnnpp --help`")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()[0]
    help_time = time_help(args.help_repeats)
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        runs = {"cold": run_once(os.path.join(tmp, "cold"), cache)}
        if not args.quick:
            runs["warm"] = run_once(os.path.join(tmp, "warm"), cache)
    result = {
        "benchmark": "quickstart",
        "command": " ".join(COMMAND) + " DIR",
        "produced_by": "python benchmarks/quickstart.py" + (" --quick" if args.quick else ""),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "target": "bnnpp --help < 1 s; cold demo < 30 s wall with test accuracy >= 0.86; run-folder write <= 2 s",
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "help": help_time,
        "runs": runs,
    }
    rows = [
        "| start | wall s | import s | compile s | fit s (incl. compile) | predict s | write s | write CPU s | test accuracy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        s = r["seconds"]
        rows.append(
            f"| {name} | {r['wall_seconds']:.1f} | {s['import']:.1f} | {s['compile']:.1f} | {s['fit']:.1f} | "
            f"{s['predict']:.1f} | {s['write']:.1f} | {s.get('write_cpu', float('nan')):.1f} | {r['test']['accuracy']:.3f} |"
        )
    md = "\n".join(
        [
            "# quickstart: the README moons demo",
            "",
            f"Command: `{result['command']}` (run by `{result['produced_by']}`), {result['date']}, {result['machine']}.",
            f"Target: {result['target']}.",
            (
                f"Load average (1 min) of the machine: {load_before:.1f} before, {result['load_average_1min']['after']:.1f} "
                f"after (on {os.cpu_count()} cores; above that number every wall time stretches)."
            ),
            "",
            (
                f"`bnnpp --help`: median {help_time['median_seconds']:.2f} s, max {help_time['max_seconds']:.2f} s over "
                f"{help_time['repeats']} fresh processes."
            ),
            "",
            *rows,
            "",
        ]
    )
    write_results(args.results, "quickstart", result, md)
    print(md)
    return result


if __name__ == "__main__":
    main()
