#!/usr/bin/env bash
# Issue 36 on a GPU: are two uninterrupted bnnpp fits bit-identical there? Two moons/bbb fits side by side,
# with default XLA flags and with --xla_gpu_deterministic_ops=true; prints the max |difference| per site.
# Usage (device machine, repository root, wheels in .whl/): OUT=DIR bash benchmarks/studies/gpu_determinism.sh
source benchmarks/studies/gpu_env.sh
F="fit --data moons --method bbb --epochs 400 --batch-size 100 --num-samples 20 --quiet --no-cache"
for v in plain det; do
  [ $v = det ] && export XLA_FLAGS=--xla_gpu_deterministic_ops=true
  python3 -m bnnpp $F --out $OUT/$v.1 & python3 -m bnnpp $F --out $OUT/$v.2 & wait
done
python3 - <<'PY'
import os, numpy as np, bnnpp
for v in ("plain", "det"):
    a, b = bnnpp.load(f"{os.environ['OUT']}/{v}.1/posterior.nc"), bnnpp.load(f"{os.environ['OUT']}/{v}.2/posterior.nc")
    print(v, {k: float(np.max(np.abs(np.asarray(a.samples[k]) - np.asarray(b.samples[k])))) for k in a.samples})
PY
rm -rf $OUT/*.1 $OUT/*.2
