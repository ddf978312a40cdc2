#!/usr/bin/env bash
# One GPU session (2026-11-27, third): issue 38's runs with the local reparameterisation and issue 36's
# GPU row, side by side on one device.
#   A   2×400 scale-mixture BBB, 600 epochs, cosine 1e-3 → 1e-5, ρ at 0.1 of the means' rate, `local`,
#       σ₀ = 0.05: the "never rises by more than 0.15 points after epoch 100" criterion and the 2×400 number.
#   B   2×1200, `local`, σ₀ = 0.02, ρ at 0.03 (the grid's next cell: σ₀ = 0.02 beat 0.05 with `reparam`).
#   C   2×1200, `local`, σ₀ = 0.05, ρ at 0.03, seed 1 (the chosen cell again, another seed).
#   D   2×1200, `local`, σ₀ = 0.05, ρ at 0.1 (faster σ's: more informative SNR for pruning?).
#   T   tests/test_checkpoints.py's CLI Ctrl-C/resume test, run without XLA_PYTHON_CLIENT_PREALLOCATE
#       in its environment while another process holds a JAX GPU client with XLA's default
#       preallocation (and the four BBB runs hold theirs).
# Every run ends with the predictive from 100 draws and the SNR pruning table (--final); the cell is
# chosen on the validation split (the last 10,000 training images).
# Usage (device machine, repository root, wheels in .whl/, MNIST in .gpu_data/mnist):
#   bash benchmarks/studies/gpu_wave6.sh OUTDIR        SMOKE=1 for a tiny CPU check of the script
set -u
OUTDIR=${1:?usage: gpu_wave6.sh OUTDIR}
source benchmarks/studies/gpu_env.sh
R=$OUTDIR/mnist_bbb_local
mkdir -p "$R" "$OUTDIR/ctrl_c"
D=benchmarks/studies/mnist_bbb_drift.py
if [ "${SMOKE:-0}" = 1 ]; then
  COMMON="--n-train 2000 --n-test 1000 --epochs 3 --schedule cosine --record-every 2 --final --out $R"
  H400="--hidden 20 20"; H1200="--hidden 30 30"; LIMIT=60; HOLD=200
else
  COMMON="--n-train 50000 --epochs 600 --schedule cosine --record-every 10 --final --out $R"
  H400="--hidden 400 400"; H1200="--hidden 1200 1200"; LIMIT=${LIMIT:-430}; HOLD=400
fi
T0=$SECONDS
run() {  # run TAG LABEL ARGS...: one drift run, no preallocation (four share the device)
  local tag=$1 label=$2; shift 2
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout $((LIMIT + 120)) python3 $D --label "$label" "$@" --estimator local \
    --time-limit $LIMIT $COMMON > "$R/$tag.log" 2>&1 &
}
run A 2x400_local_s0.05_rho0.1 $H400 --init-scale 0.05 --rho-lr-factor 0.1
run B 2x1200_local_s0.02_rho0.03 $H1200 --init-scale 0.02 --rho-lr-factor 0.03
run C 2x1200_local_s0.05_rho0.03_seed1 $H1200 --init-scale 0.05 --rho-lr-factor 0.03 --seed 1
run D 2x1200_local_s0.05_rho0.1 $H1200 --init-scale 0.05 --rho-lr-factor 0.1
# T: a process holding a GPU client with XLA's default preallocation, then the test without the variable
env -u XLA_PYTHON_CLIENT_PREALLOCATE timeout $((HOLD + 30)) python3 -c "
import time, jax, jax.numpy as jnp
x = jnp.ones(1).block_until_ready()
print('holder:', jax.devices(), [d.memory_stats() for d in jax.devices()][:1], flush=True)
time.sleep($HOLD)" > "$OUTDIR/ctrl_c/holder.log" 2>&1 &
HOLDER=$!
sleep 15
env -u XLA_PYTHON_CLIENT_PREALLOCATE timeout 300 python3 -m pytest -p no:cacheprovider -q -m slow \
  tests/test_checkpoints.py -k test_cli_ctrl_c_checkpoints_and_resume_finishes_the_same_fit > "$OUTDIR/ctrl_c/pytest.log" 2>&1
echo "ctrl_c test: rc $? at $((SECONDS - T0)) s" >> "$OUTDIR/device.txt"
nvidia-smi >> "$OUTDIR/ctrl_c/holder.log" 2>&1
kill $HOLDER 2>/dev/null
wait
echo "all: $((SECONDS - T0)) s (limit $LIMIT s)" >> "$OUTDIR/device.txt"
python3 $D --summarize "$R"/*.json --md "$R/summary.md" --every 50 > /dev/null 2>&1
tail -n 3 "$R"/*.log "$OUTDIR/ctrl_c/pytest.log"; cat "$OUTDIR/device.txt"
