"""sgld with given options on the six reference models (``tests/reference_models.py``): mean z²,
the largest |z| and the sds' ratio range against ``tests/data/reference_posteriors.json``, one
line per model. Used to choose sgld's defaults for models without bnnpp layers
(``results/sgld_defaults.md``).

    python benchmarks/sgld_defaults.py '{"noncentered": false, "preconditioner": "adaptive"}'
    python benchmarks/sgld_defaults.py '{}' funnel,irt_rasch
"""

import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import numpy as np
from reference_models import PROBLEMS
import bnnpp
from bnnpp.diagnostics import moment_error
ref = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "reference_posteriors.json")))
opts = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
probs = sys.argv[2].split(",") if len(sys.argv) > 2 else list(ref)
for prob in probs:
    model, x, y = PROBLEMS[prob]
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bnnpp.fit(model, (x, y), method="sgld", seed=0, progress=False, **opts)
    e = moment_error(post, ref[prob]["sites"])
    print(f"{prob:24s} z2={e['mean_sq_z']:.4f} maxz={e['max_abs_z']:.2f}({e['worst']}) sd={e['sd_ratio_min']:.2f}-{e['sd_ratio_max']:.2f} pass={e['passed']} {time.time()-t0:.0f}s", flush=True)
