# Sourced by .ci/run, ci/slurm.sh and ci/vllm.sh: one test run at a time on a machine.
# The test Slurm cluster (its daemons, ports, /etc/slurm, the bridge and the node namespaces, its state in
# /var/lib/accelsweep-slurm) and the vllm venv (an editable install of one checkout) are machine-wide: two
# checkouts' runs at once would stop, restart or re-point them under each other. .ci/run holds this lock for its
# whole run (ci_lock); the scripts refuse to change the cluster or the venv for anyone else while it is held
# (ci_guard). The kernel drops the lock when the run ends, however it ends: there is no stale lock to remove.
CI_LOCK=${ACCELSWEEP_CI_LOCK:-/run/lock/accelsweep-ci.lock}
CI_OWNER=$CI_LOCK.owner   # who holds it: checkout, pid, since

# ci_owner: the run that holds the lock, in words.
ci_owner() { cat "$CI_OWNER" 2>/dev/null || echo "an unknown process"; }

# ci_lock: take the lock on fd 9 for this shell's lifetime, waiting (and saying for whom) while another run holds
# it; children that must not keep it (daemons) are started with 9>&-.
ci_lock() {
  exec 9>>"$CI_LOCK"
  if ! flock -n 9; then
    echo "[ci] waiting for the machine's test cluster and vllm venv: in use by $(ci_owner)" >&2
    flock 9
  fi
  ACCELSWEEP_CI_RUN="checkout $PWD (.ci/run, pid $$, since $(date -u +%FT%TZ))"
  echo "$ACCELSWEEP_CI_RUN" >"$CI_OWNER"
  export ACCELSWEEP_CI_RUN
}

# ci_guard WHAT: exit 1 unless this process may change the machine's test cluster or venv (WHAT, in words): no run
# holds the lock, or it is the run this process belongs to (ACCELSWEEP_CI_RUN, inherited from .ci/run).
ci_guard() {
  [[ -e $CI_LOCK ]] || return 0
  local held=""
  { flock -n 8 || held=1; } 8>>"$CI_LOCK"
  [[ -z $held || ${ACCELSWEEP_CI_RUN:-} == "$(cat "$CI_OWNER" 2>/dev/null)" ]] && return 0
  echo "[ci] ERROR: not done: $1; the machine's test cluster and vllm venv are in use by $(ci_owner); run it once" \
    "that run has ended (the lock $CI_LOCK is dropped when it does)" >&2
  exit 1
}
