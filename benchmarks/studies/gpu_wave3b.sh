#!/usr/bin/env bash
# One GPU session (2026-11-27, second): issue 38's 2×1200 validation grid and issue 39's GPU rows.
#   B1..B3  2×1200 scale-mixture BBB, 600 epochs, cosine 1e-3 → 1e-5, ρ at 0.03 of the means' rate,
#           varying the estimator (reparam / local) and σ₀ (0.05 / 0.02); the cell is chosen on the
#           validation split (last 10,000 training images), --final scores predictive + SNR pruning.
#   S       benchmarks/samplers.py on moons: mclmc at its GPU default (64 chains) and NUTS
#           (4 chains × (150 + 150)), draws per second side by side on the same GPU.
# Usage (device machine, repository root, wheels in .whl/, MNIST in .gpu_data/mnist):
#   bash benchmarks/studies/gpu_wave3b.sh OUTDIR        SMOKE=1 for a tiny CPU check of the script
set -u
OUTDIR=${1:?usage: gpu_wave3b.sh OUTDIR}
source benchmarks/studies/gpu_env.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false
R=$OUTDIR/mnist_bbb_2x1200_grid
mkdir -p "$R" "$OUTDIR/samplers"
D=benchmarks/studies/mnist_bbb_drift.py
if [ "${SMOKE:-0}" = 1 ]; then
  COMMON="--n-train 2000 --n-test 1000 --epochs 3 --schedule cosine --record-every 2 --final --out $R"
  H="--hidden 30 30"; LIMIT=60; SQ="--quick"; SOPT='{}'
else
  COMMON="--n-train 50000 --epochs 600 --schedule cosine --record-every 10 --final --out $R"
  H="--hidden 1200 1200"; LIMIT=${LIMIT:-360}; SQ=""; SOPT='{"nuts": {"num_warmup": 150, "num_samples": 150}}'
fi
T0=$SECONDS
P="--rho-lr-factor 0.03 --time-limit $LIMIT"
timeout $((LIMIT + 90)) python3 $D --label 2x1200_reparam_s0.05 $H $P --estimator reparam --init-scale 0.05 $COMMON > "$R/B1.log" 2>&1 &
timeout $((LIMIT + 90)) python3 $D --label 2x1200_local_s0.05 $H $P --estimator local --init-scale 0.05 $COMMON > "$R/B2.log" 2>&1 &
timeout $((LIMIT + 90)) python3 $D --label 2x1200_reparam_s0.02 $H $P --estimator reparam --init-scale 0.02 $COMMON > "$R/B3.log" 2>&1 &
timeout $((LIMIT + 90)) python3 benchmarks/samplers.py --problems moons --methods mclmc,nuts $SQ --options "$SOPT" \
  --name gpu_samplers_moons > "$OUTDIR/samplers/S.log" 2>&1 &
wait
echo "all: $((SECONDS - T0)) s (limit $LIMIT s)" >> "$OUTDIR/device.txt"
cp benchmarks/results/gpu_samplers_moons.* "$OUTDIR/samplers/" 2>/dev/null
python3 $D --summarize "$R"/*.json --md "$R/summary.md" --every 50 > /dev/null 2>&1
tail -n 4 "$R"/*.log "$OUTDIR/samplers/S.log"
