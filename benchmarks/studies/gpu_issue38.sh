#!/usr/bin/env bash
# Issue 38 on one GPU (the device recipe in ../shared/GPU-NOTES.md): the paper-scale BBB runs with
# Adam on ρ at a tenth of the means' rate, side by side in one session:
#   A  2×400,  600 epochs, cosine 1e-3 → 1e-5, seed 0 (per-epoch test and validation error at the means)
#   A1 the same, seed 1
#   B  2×1200, 600 epochs, the same schedule (stops training at --time-limit and still scores)
#   D  benchmarks/mnist_bbb.py's default mode (100 epochs), the protocol the README cites
# Each drift run ends with the predictive from 100 draws and the SNR pruning table (--final).
# Usage (device machine, repository root, wheels in .whl/, MNIST in .gpu_data/mnist):
#   bash benchmarks/studies/gpu_issue38.sh OUTDIR        SMOKE=1 for a tiny CPU check of the script
set -u
OUTDIR=${1:?usage: gpu_issue38.sh OUTDIR}
source benchmarks/studies/gpu_env.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false
R=$OUTDIR/mnist_bbb_600ep
mkdir -p "$R"
D=benchmarks/studies/mnist_bbb_drift.py
if [ "${SMOKE:-0}" = 1 ]; then
  COMMON="--n-train 2000 --n-test 1000 --epochs 3 --schedule cosine --record-every 2 --final --out $R"
  H400="--hidden 20 20"; H1200="--hidden 30 30"; LIMIT=60; DMODE="--quick --hidden 20 20"
else
  COMMON="--n-train 50000 --epochs 600 --schedule cosine --record-every 10 --final --out $R"
  H400="--hidden 400 400"; H1200="--hidden 1200 1200"; LIMIT=400; DMODE="--rounds 2"
fi
T0=$SECONDS
# phase 1: the 2×400 run and the default mode side by side
timeout 540 python3 $D --label mnist_bbb_2x400_600ep_rho0.1 $H400 --rho-lr-factor 0.1 --time-limit $LIMIT $COMMON > "$R/A.log" 2>&1 &
mkdir -p "$OUTDIR/mnist_bbb_default"
timeout 540 python3 benchmarks/mnist_bbb.py $DMODE --out "$OUTDIR/mnist_bbb_default" > "$OUTDIR/mnist_bbb_default/D.log" 2>&1 &
wait
echo "phase 1: $((SECONDS - T0)) s" >> "$OUTDIR/device.txt"
# phase 2: 2×1200 and a second seed of 2×400 in the time left (training stops at the limit, --final still runs)
LEFT=$(( ${BUDGET:-480} - (SECONDS - T0) - 40 ))
[ $LEFT -lt 30 ] && LEFT=30
timeout $((LEFT + 60)) python3 $D --label mnist_bbb_2x1200_600ep_rho0.1 $H1200 --rho-lr-factor 0.1 --time-limit $LEFT $COMMON > "$R/B.log" 2>&1 &
timeout $((LEFT + 60)) python3 $D --label mnist_bbb_2x400_600ep_rho0.1_seed1 --seed 1 $H400 --rho-lr-factor 0.1 --time-limit $LEFT $COMMON > "$R/A1.log" 2>&1 &
wait
echo "phase 2: $((SECONDS - T0)) s (limit $LEFT s)" >> "$OUTDIR/device.txt"
python3 $D --summarize "$R"/*.json --md "$R/summary.md" --every 50 > /dev/null 2>&1
tail -n 3 "$R"/*.log "$OUTDIR/mnist_bbb_default/D.log"
