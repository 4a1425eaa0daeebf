# Sourced by the ci/gpu scripts: $out (the output folder: $OUT, else ./gpu-check), the carried wheels (.whl/, from
# ci/gpu/wheels.sh) installed beside the image's packages, this checkout on PYTHONPATH, and the GPU named.
set -euo pipefail
repo=$PWD
out=${OUT:-$PWD/gpu-check}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$repo
else
  export PYTHONPATH=$repo
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
