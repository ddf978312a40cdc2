"""What the default SWAG-phase rate (the curvature measured by power iteration at the end of
pretraining, ``bnnpp/inference/swag.py``) costs: swag fit wall time (compile included, one
process, nothing cached between fits) with the default against a given rate, on UCI yacht
split 0 (conformal.py's protocol, twice each) and on 10,000 MNIST images (MLP 784-200-10,
1,000 pretraining steps, 2 SWAG epochs of 128).

    python benchmarks/studies/swag_rate_cost.py
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from _common import default_data_dir, machine, write_results  # noqa: E402


def main() -> int:
    import bnnpp

    warnings.simplefilter("ignore")
    d = bnnpp.data.uci("yacht", 0, default_data_dir(), validation=0.2, seed=0)
    uci = bnnpp.models.mlp((50,), activation="relu", likelihood="gaussian", prior=bnnpp.priors.normal(1.0))
    m = bnnpp.data.load("mnist", default_data_dir(), validation=0, flatten=True)
    mlp = bnnpp.models.mlp((200,), activation="relu", num_classes=10, prior=bnnpp.priors.normal(1.0), standardize=False)
    mnist_options = {"pretrain_steps": 1000, "swag_epochs": 2, "batch_size": 128, "num_samples": 5}
    cases = [("yacht split 0", uci, (d.x_train, d.y_train), {"num_samples": 30}, 0.001, 2),
             ("MNIST 10k", mlp, (m.x_train[:10000], m.y_train[:10000]), mnist_options, 0.01, 1)]
    rows = []
    for name, model, data, options, given, repeats in cases:
        for rep in range(repeats):
            for label, rate in (("default", None), (f"given {given}", given)):
                t0 = time.perf_counter()
                post = bnnpp.fit(model, data, method="swag", seed=0, progress=False, swag_learning_rate=rate, **options)
                rows.append({"problem": name, "repeat": rep, "rate_option": label, "seconds": time.perf_counter() - t0,
                             "rate": post.stats.extras["swag_learning_rate"][0], "curvature": post.stats.extras["curvature"][0]})
                print(rows[-1], flush=True)
    cmd = "python benchmarks/studies/swag_rate_cost.py"
    result = {"produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(), "rows": rows}
    lines = ["# The default SWAG-phase rate's cost: fit wall time, compile included", "", f"`{cmd}`, {result['date']}, {result['machine']}.", "",
             "| problem | repeat | rate option | seconds | rate used | λ |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['problem']} | {r['repeat']} | {r['rate_option']} | {r['seconds']:.1f} | {r['rate']:.3g} | "
              f"{'—' if r['curvature'] is None else format(r['curvature'], '.4g')} |" for r in rows]
    out = os.path.join(HERE, "results", "swag_rate_cost")
    write_results(os.path.dirname(out), os.path.basename(out), result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
