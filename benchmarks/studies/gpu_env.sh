# Sourced by the gpu_*.sh scripts (the recipe of ../shared/GPU-NOTES.md): installs the wheels in .whl/
# into a temporary folder for this checkout and writes the device line to "$OUTDIR/device.txt"
# (OUTDIR set by the caller, or $OUT).
S=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target "$S" .whl/*.whl 2>/dev/null || true
export PYTHONPATH="$S:$PWD" BNNPP_DATA_DIR="${BNNPP_DATA_DIR:-$PWD/.gpu_data}"
mkdir -p "${OUTDIR:-$OUT}"
{ nvidia-smi -L 2>/dev/null; python3 -c "import jax, numpyro, sys; print(sys.version.split()[0], 'jax', jax.__version__, 'numpyro', numpyro.__version__, jax.devices())"; } > "${OUTDIR:-$OUT}/device.txt" 2>&1
