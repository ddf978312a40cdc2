"""``bnnpp COMMAND --help`` wall time, in fresh processes, for each command.

Usage: ``python benchmarks/studies/cli_help.py [--repeats 5] [--baseline SRC] [--results DIR]``.
``--baseline SRC`` also times a source tree SRC (e.g. an older commit from ``git archive``)
the same way, interleaved run by run, so both see the same machine load. Writes
``results/cli_help.{json,md}`` with the median and max seconds per command and tree, the load
average before and after, and the Python version.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCHMARKS)
COMMANDS = ("fit", "predict", "compare", "sweep", "evaluate", "prune")


def once(src: str, command: str) -> float:
    """Seconds of one ``python -m bnnpp COMMAND --help`` importing bnnpp from ``src``."""
    env = {**os.environ, "PYTHONPATH": src}
    t0 = time.perf_counter()
    # cwd=src too: ``python -m`` puts the working directory first on the path
    proc = subprocess.run([sys.executable, "-m", "bnnpp", command, "--help"], capture_output=True, text=True, env=env,
                          cwd=src, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{src}: bnnpp {command} --help failed:\n{proc.stderr}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", default=None, help="another source tree to time the same way")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    trees = {"this tree": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    load_before = os.getloadavg()
    times: dict = {t: {c: [] for c in COMMANDS} for t in trees}
    for _ in range(args.repeats):
        for c in COMMANDS:
            for t, src in trees.items():
                times[t][c].append(once(src, c))
    out = {
        "command": " ".join(["python", "benchmarks/cli_help.py", *sys.argv[1:]]),
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "seconds": {t: {c: {"median": statistics.median(v), "max": max(v)} for c, v in per.items()} for t, per in times.items()},
    }
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "cli_help.json"), "w") as f:
        json.dump(out, f, indent=1)
    head = "| command | " + " | ".join(f"{t} median (max) s" for t in trees) + " |"
    lines = [f"`{out['command']}`: Python {out['python']}, {out['cpus']} CPUs, load average "
             f"{load_before[0]:.1f} before, {out['load_average_after'][0]:.1f} after; {args.repeats} fresh processes each.",
             "", head, "|---" * (len(trees) + 1) + "|"]
    for c in COMMANDS:
        cells = [f"{out['seconds'][t][c]['median']:.2f} ({out['seconds'][t][c]['max']:.2f})" for t in trees]
        lines.append(f"| `bnnpp {c} --help` | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.results, "cli_help.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
