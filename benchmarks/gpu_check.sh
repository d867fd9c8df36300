#!/usr/bin/env bash
# GPU check: the GPU part of the test suite, then the GPU benchmark (CPU path beside it).
# For a machine with an NVIDIA GPU, cupy and jax[cuda], and no network. Wheels for what the
# machine lacks (array-api-compat, pyamg) can be carried in .whl/ and are installed first.
# Usage: bash benchmarks/gpu_check.sh [--quick]     (target: under 8 minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/linops-site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/linops-site"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import cupy, jax; print('cupy', cupy.__version__, '| jax', jax.__version__, jax.devices())" || exit 1
status=0
timeout 300 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/linops/test_gpu.py tests/linops/test_operators.py -k "cupy or test_gpu" -rs || status=$?
timeout 240 python3 benchmarks/gpu_bench.py "$@" || status=$?
exit $status
