"""Do two checkouts give the same fits? Every method's draws, traces and per-draw statistics on
moons (the 4-unit net and each method's smoke settings, ``Method.smoke`` — in checkouts before
it, the quick options of tests/test_contract.py — seed 3; map and bbb on minibatches of 100),
written by one checkout and compared with another's bit for bit. The opt-in samplers (chees,
mclmc, pathfinder) are imported, so every method can be named.

    PYTHONPATH=<checkout A> python benchmarks/studies/same_draws.py fit a.npz [--methods map,laplace]
    PYTHONPATH=<checkout B> python benchmarks/studies/same_draws.py fit b.npz [--methods ...]
    python benchmarks/studies/same_draws.py compare a.npz b.npz

Run from a checkout's root (it reads tests/test_contract.py's QUICK). ``compare`` prints the
arrays that differ (none: the fits are the same).
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

LAPLACE = {"kron": {}, "full": {"hessian": "full", "prior_precision": "model"}, "diag": {"hessian": "diag", "batch_size": 50}}


def fit(path: str, methods: list[str]) -> None:
    warnings.simplefilter("ignore")
    import bnnpp
    import bnnpp.inference.chees
    import bnnpp.inference.mclmc
    import bnnpp.inference.pathfinder  # noqa: F401  (importing registers them)
    from bnnpp.inference.registry import get_method

    QUICK = {m: getattr(get_method(m), "smoke", None) for m in methods}
    if None in QUICK.values():  # a checkout from before Method.smoke
        sys.path.insert(0, "tests")
        from test_contract import QUICK

    moons = bnnpp.data.load_synthetic("moons", seed=0)
    net = bnnpp.models.mlp((4,), num_classes=2, prior=bnnpp.priors.normal(bnnpp.priors.half_normal(1.0)))
    out = {}
    for m in methods:
        variants = LAPLACE if m == "laplace" else {"": {"batch_size": 100} if m in ("map", "bbb") else {}}
        for label, extra in variants.items():
            p = bnnpp.fit(net, moons, method=m, seed=3, progress=False, **{**QUICK[m], **extra})
            for group, arrays in (("samples", p.samples), ("traces", p.stats.traces), ("stats", p.stats.sample_stats)):
                out.update({f"{m}{label}:{group}:{k}": np.asarray(v) for k, v in arrays.items()})
    np.savez(path, **out)


def compare(a: str, b: str) -> None:
    x, y = np.load(a), np.load(b)
    differ = sorted(set(x.files) ^ set(y.files)) + [k for k in x.files if k in y.files and not np.array_equal(x[k], y[k], equal_nan=True)]
    print(f"{len(x.files)} arrays; differ: {differ or 'none'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit")
    f.add_argument("out")
    f.add_argument("--methods", default="map,advi,bbb,sgld,nuts,chees,mclmc,pathfinder,ensemble,swag,multiswag,mc_dropout,vd,laplace")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = parser.parse_args()
    if args.command == "fit":
        fit(args.out, args.methods.split(","))
    else:
        compare(args.a, args.b)
