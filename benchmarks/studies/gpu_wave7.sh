#!/usr/bin/env bash
# One GPU session (2026-11-27, fourth): issue 38's 2×1200 rows on the paper's prior grid beyond
# −log σ1 = 0. Three 600-epoch 2×1200 runs side by side (the most that finished 600 epochs in
# ~370 s together last time), all `local`, σ₀ = 0.05, cosine 1e-3 → 1e-5:
#   A   prior π = 3/4, −log σ1 = 1, −log σ2 = 8, ρ at 0.1 (a narrower wide component: a stronger
#       pull of the means to zero on the net that fits its training set to NLL ≈ 0)
#   B   prior π = 3/4, −log σ1 = 2, −log σ2 = 8, ρ at 0.1 (the grid's narrowest)
#   C   prior π = 3/4, −log σ1 = 0, −log σ2 = 8, ρ at 0.3 (the chosen cell, faster σ's: is the
#       SNR more informative for pruning without the drift `local` removed at 0.1?)
# Every run ends with the predictive from 100 draws and the SNR pruning table (--final); the cell is
# chosen on the validation split (the last 10,000 training images) among these and the earlier
# 600-epoch 2×1200 records.
# Usage (device machine, repository root, wheels in .whl/, MNIST in .gpu_data/mnist):
#   bash benchmarks/studies/gpu_wave7.sh OUTDIR        SMOKE=1 for a tiny CPU check of the script
set -u
OUTDIR=${1:?usage: gpu_wave7.sh OUTDIR}
source benchmarks/studies/gpu_env.sh
R=$OUTDIR/mnist_bbb_1200_prior
mkdir -p "$R"
D=benchmarks/studies/mnist_bbb_drift.py
if [ "${SMOKE:-0}" = 1 ]; then
  COMMON="--n-train 2000 --n-test 1000 --epochs 3 --schedule cosine --record-every 2 --final --out $R"
  H="--hidden 30 30"; LIMIT=60
else
  COMMON="--n-train 50000 --epochs 600 --schedule cosine --record-every 10 --final --out $R"
  H="--hidden 1200 1200"; LIMIT=${LIMIT:-450}
fi
T0=$SECONDS
run() {  # run TAG LABEL ARGS...: one drift run, no preallocation (three share the device)
  local tag=$1 label=$2; shift 2
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout $((LIMIT + 90)) python3 $D --label "$label" $H "$@" --estimator local \
    --init-scale 0.05 --time-limit $LIMIT $COMMON > "$R/$tag.log" 2>&1 &
}
run A 2x1200_local_p0.75_1_8_rho0.1 --prior mixture:0.75,1,8 --rho-lr-factor 0.1
run B 2x1200_local_p0.75_2_8_rho0.1 --prior mixture:0.75,2,8 --rho-lr-factor 0.1
run C 2x1200_local_p0.75_0_8_rho0.3 --prior mixture:0.75,0,8 --rho-lr-factor 0.3
wait
echo "all: $((SECONDS - T0)) s (limit $LIMIT s)" >> "$OUTDIR/device.txt"
python3 $D --summarize "$R"/*.json --md "$R/summary.md" --every 50 > /dev/null 2>&1
tail -n 3 "$R"/*.log; cat "$OUTDIR/device.txt"
