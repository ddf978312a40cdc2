"""The seed study's prior grid under ADVI, and what vmapping the grid saves.

Grid: weight priors normal / laplace / cauchy / flat × scale hyperpriors fixed (a log grid
of scales) / half-normal(1) / half-cauchy(1) / inverse-gamma(1, 1) on the variance, on moons
and circles (1,000 points, 700/300 split), the 2-5-5-2 tanh net, several seeds. Each
structure group (same families, different numbers or seeds) trains in one vmapped program.

Timing, measured in the same run: the vmapped sweep against the one-by-one loop of
``bnnpp.fit`` calls over the same configurations (a subset: every fixed scale of the normal
prior plus its three hyperpriors on moons, to keep the loop's time bounded), and the whole
grid vmapped.

    python benchmarks/sweep.py            # full: writes results/sweep.{json,md}
    python benchmarks/sweep.py --quick    # < 2 minutes, for the smoke test
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys

from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))

FULL = {"steps": 10_000, "num_samples": 200, "seeds": (0, 1, 2, 3, 4), "scales": (0.1, 0.3, 1.0, 3.0, 10.0)}
QUICK = {"steps": 200, "num_samples": 50, "seeds": (0, 1), "scales": (0.3, 3.0)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small grid and few steps (< 2 minutes)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for sweep.{json,md}")
    args = ap.parse_args(argv)

    import bnnpp
    from bnnpp import sweep
    from bnnpp.reports import sweep_table

    cfg = QUICK if args.quick else FULL
    options = {"num_steps": cfg["steps"], "num_samples": cfg["num_samples"]}
    moons, circles = bnnpp.data.moons(), bnnpp.data.circles()

    # 1. timing: the same configurations vmapped and one by one, side by side
    subset = sweep.grid(("normal",), ("fixed", "inverse-gamma") if args.quick else sweep.HYPERPRIOR_CHOICES, cfg["scales"])
    timing_seeds = cfg["seeds"][:2] if not args.quick else cfg["seeds"]
    t = {}
    for mode in ("vmapped", "loop"):
        res = sweep.sweep([moons], subset, method="advi", seeds=timing_seeds, vmap=mode == "vmapped", progress=False, **options)
        t[mode] = res
        print(f"timing subset, {mode}: {len(res['runs'])} fits in {res['seconds']:.1f} s", flush=True)
    same = max(
        abs(a["nll"] - b["nll"])
        for a, b in zip(
            sorted(t["vmapped"]["runs"], key=lambda r: (r["label"], r["seed"])),
            sorted(t["loop"]["runs"], key=lambda r: (r["label"], r["seed"])),
            strict=True,
        )
    )

    # 2. the grid, vmapped (quick mode: the timing subset is the grid)
    if args.quick:
        full = t["vmapped"]
    else:
        configs = sweep.grid(("normal", "laplace", "cauchy", "flat"), sweep.HYPERPRIOR_CHOICES, cfg["scales"])
        full = sweep.sweep([moons, circles], configs, method="advi", seeds=cfg["seeds"], progress=True, **options)
    print(f"grid: {len(full['runs'])} fits in {full['seconds']:.1f} s ({full['compiled_groups']} compiled groups)", flush=True)
    table = sweep.summarise(full["runs"])

    result = {
        "benchmark": "sweep",
        "produced_by": "python benchmarks/sweep.py" + (" --quick" if args.quick else ""),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "method": "advi",
        "options": options,
        "seeds": list(cfg["seeds"]),
        "fixed_scales": list(cfg["scales"]),
        "timing": {
            "configurations": [c.label for c in subset],
            "seeds": list(timing_seeds),
            "fits": len(t["loop"]["runs"]),
            "vmapped_seconds": t["vmapped"]["seconds"],
            "loop_seconds": t["loop"]["seconds"],
            "speedup": t["loop"]["seconds"] / t["vmapped"]["seconds"],
            "vmapped_compiled_groups": t["vmapped"]["compiled_groups"],
            "max_nll_difference": same,
        },
        "grid": {"fits": len(full["runs"]), "seconds": full["seconds"], "compiled_groups": full["compiled_groups"]},
        "table": table,
        "published": {"moons": "0.851 (normal prior, inverse-gamma hyperprior)", "circles": "0.735 (cauchy prior, inverse-gamma hyperprior)"},
    }
    tm = result["timing"]
    lines = [
        "# sweep: weight priors × scale hyperpriors under ADVI",
        "",
        f"`{result['produced_by']}`, {result['date']}, {result['machine']}.",
        f"ADVI {cfg['steps']} steps, {cfg['num_samples']} draws, seeds {list(cfg['seeds'])}; fixed scales "
        f"{list(cfg['scales'])} (the best by mean test accuracy is shown).",
        "",
        "## vmapped grid against the one-by-one loop (same run, same configurations)",
        "",
        "| fits | one-by-one `bnnpp.fit` s | vmapped s | speed-up | compiled programs (vmapped) | max NLL difference |",
        "|---|---|---|---|---|---|",
        f"| {tm['fits']} | {tm['loop_seconds']:.1f} | {tm['vmapped_seconds']:.1f} | {tm['speedup']:.1f}× | "
        f"{tm['vmapped_compiled_groups']} | {tm['max_nll_difference']:.1e} |",
        "",
        f"Configurations: {', '.join(tm['configurations'])} on moons, seeds {tm['seeds']}.",
        f"The whole grid: {result['grid']['fits']} fits in {result['grid']['seconds']:.0f} s, "
        f"{result['grid']['compiled_groups']} compiled programs.",
        "",
        "## test accuracy and NLL (mean ± sd over seeds)",
        "",
        *sweep_table(table),
    ]
    lines += ["", "Published (Zharikov, Isachenko & Bochkarev, PyMC3 ADVI): moons 0.851 (normal, inverse-gamma), circles 0.735 (cauchy, inverse-gamma)."]
    write_results(args.results, "sweep", result, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
