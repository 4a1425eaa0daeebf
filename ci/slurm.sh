#!/usr/bin/env bash
# Single-node Slurm cluster on localhost for the test-suite (Debian 12, root, no systemd).
#   ci/slurm.sh start   install if missing, start munged, mariadbd, slurmdbd, slurmctld, slurmd
#   ci/slurm.sh stop    stop them by recorded pid (never fails)
#   ci/slurm.sh status  which daemons run, plus sinfo
set -euo pipefail

CLUSTER=accelsweep-ci
ACCOUNT=accelsweep              # root's default account; MaxSubmitJobs high enough for the 10,000-point benchmark
SMALL_ACCOUNT=accelsweep-small  # MaxSubmitJobs=$SMALL_SUBMIT: partial submission with a handful of points
MAX_SUBMIT=20000
SMALL_SUBMIT=6
MAX_ARRAY_SIZE=101              # Slurm's default is 1001: a small one splits groups with few points
STATE=${ACCELSWEEP_SLURM_STATE:-/var/lib/accelsweep-slurm}   # pids, logs, Slurm state
LOG=$STATE/log
RUN=$STATE/run
DBPASS=accelsweep-ci            # local throw-away database, reachable from localhost only
PARTITIONS="debug cpu v100 a100 h100 h200 gh200 mi250 mi300x gaudi1 gaudi2 gaudi3"
DAEMONS="munged mariadbd slurmdbd slurmctld slurmd"   # start order; stop is the reverse
TIMEOUT=60

log() { echo "[ci/slurm] $*" >&2; }

tails() {
  local f
  for f in "$LOG"/*.log /var/log/munge/munged.log; do
    [[ -s $f ]] && { echo "----- tail $f" >&2; tail -n 25 "$f" >&2; }
  done
  return 0
}

die() { log "ERROR: $*"; tails; exit 1; }

# wait_for DESCRIPTION COMMAND...: retry COMMAND once a second for up to $TIMEOUT s;
# give up early if a daemon started so far has died.
wait_for() {
  local what=$1 i d; shift
  for ((i = 0; i < TIMEOUT; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    for d in $DAEMONS; do
      [[ -f $RUN/$d.pid ]] && ! running "$d" && die "$d exited while waiting for $what"
    done
    sleep 1
  done
  die "timed out after ${TIMEOUT}s waiting for $what"
}

# running NAME: its recorded pid is alive (a zombie, not yet reaped by init, counts as gone).
# Reads /proc directly: slim images lack ps.
running() {
  local pid st
  pid=$(cat "$RUN/$1.pid" 2>/dev/null) || return 1
  st=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1) || return 1
  [[ -n $st && $st != Z ]]
}

# launch NAME USER BINARY -- ARGS...: run a foreground daemon detached, recording its pid and output.
launch() {
  local name=$1 user=$2; shift 2
  running "$name" && { log "$name already running"; return 0; }
  start-stop-daemon --start --background --make-pidfile --pidfile "$RUN/$name.pid" \
    --chuid "$user" --output "$LOG/$name.log" --exec "$@"
}

# Slurm daemons fork themselves and write their PidFile (set to $RUN/NAME.pid) and timestamped
# LogFile; in the foreground (-D) they would also copy every line to stderr.
launch_slurm() {
  local name=$1; shift
  running "$name" && { log "$name already running"; return 0; }
  rm -f "$RUN/$name.pid"
  "/usr/sbin/$name" "$@" || die "$name failed to start"
  wait_for "$name pid file" test -s "$RUN/$name.pid"
}

install_packages() {
  local pkgs="slurmctld slurmd slurm-client munge slurmdbd mariadb-server" missing=""
  local p
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=" $p"
  done
  [[ -z $missing ]] && return 0
  log "installing$missing"
  apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

write_configs() {
  mkdir -p /etc/slurm
  # A mixed site on one node: typed GPUs (gpu:h100) and Gaudi cards (hpu), both counted by sacct.
  # config_overrides: the node claims 16 CPUs, 32 GB, 8 GPUs and 8 HPUs whatever the VM has.
  # DefMemPerCPU: without it a job with no --mem takes all the node's memory and jobs run one at a time.
  # EnforcePartLimits: reject a job over a partition limit (e.g. MaxTime) at submit instead of leaving it pending.
  # AccountingStorageTRES: let sacct report gres/gpu in AllocTRES; AccountingStorageEnforce: apply MaxSubmitJobs.
  cat >/etc/slurm/slurm.conf <<EOF
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SlurmdParameters=config_overrides
ReturnToService=2
EnforcePartLimits=ALL
KillWait=5
MinJobAge=5
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/hpu
AccountingStorageEnforce=associations,limits
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
MaxArraySize=$MAX_ARRAY_SIZE
MaxJobCount=50000
GresTypes=gpu,hpu
NodeName=localhost CPUs=16 RealMemory=32000 Gres=gpu:h100:8,hpu:8 State=UNKNOWN
EOF
  local p default
  for p in $PARTITIONS; do
    default=NO; [[ $p == debug ]] && default=YES
    echo "PartitionName=$p Nodes=localhost Default=$default MaxTime=02:00:00 State=UP" >>/etc/slurm/slurm.conf
  done
  # Character devices: with plain files CUDA_VISIBLE_DEVICES stays empty, without File= the node drains.
  printf '%s\n' "NodeName=localhost Name=gpu Type=h100 File=/dev/fakegpu[0-7]" \
    "NodeName=localhost Name=hpu File=/dev/fakehpu[0-7]" >/etc/slurm/gres.conf
  for p in 0 1 2 3 4 5 6 7; do
    [[ -c /dev/fakegpu$p ]] || mknod /dev/fakegpu$p c 1 3
    [[ -c /dev/fakehpu$p ]] || mknod /dev/fakehpu$p c 1 3
  done

  # slurmdbd refuses a config that is not mode 600 and owned by its SlurmUser.
  install -m 600 -o root -g root /dev/null /etc/slurm/slurmdbd.conf
  cat >/etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
EOF
}

start_munge() {
  install -d -o munge -g munge -m 755 /run/munge
  install -d -o munge -g munge -m 700 /var/log/munge /var/lib/munge
  [[ -s /etc/munge/munge.key ]] || mungekey --create --force
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  launch munged munge /usr/sbin/munged -- --foreground
  wait_for munged sh -c 'munge -n | unmunge'
}

start_mariadb() {
  install -d -o mysql -g mysql /run/mysqld
  [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$LOG/mariadb-install.log" 2>&1 ||
    die "mariadb-install-db failed"
  launch mariadbd root /usr/sbin/mariadbd -- --user=mysql
  wait_for mariadbd mariadb-admin ping
  # root logs in through the unix socket; the slurm user gets a password for slurmdbd.
  mariadb <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF
}

# add_account NAME MAX_SUBMIT_JOBS: the account, root in it, and root's MaxSubmitJobs there.
add_account() {
  sacctmgr -n -P show account format=account | grep -qx "$1" ||
    sacctmgr -i add account "$1" cluster="$CLUSTER" description=accelsweep-ci organization=ci >/dev/null
  sacctmgr -n -P show assoc user=root account="$1" format=user | grep -qx root ||
    sacctmgr -i add user root account="$1" cluster="$CLUSTER" >/dev/null
  sacctmgr -n -P show assoc user=root account="$1" format=maxsubmit | grep -qx "$2" ||
    sacctmgr -i modify user root where account="$1" cluster="$CLUSTER" set MaxSubmitJobs="$2" >/dev/null
  sacctmgr -n -P show assoc user=root account="$1" format=maxsubmit | grep -qx "$2" ||
    die "association root/$1 with MaxSubmitJobs=$2 missing"
}

healthy() {
  local d
  for d in $DAEMONS; do running "$d" || return 1; done
  sinfo -h -n localhost -o %t 2>/dev/null | grep -Eq '^(idle|mix|alloc)' && sacct -n -X >/dev/null 2>&1 &&
    current
}

# current: the running cluster has this script's configuration (else start restarts it).
# Outputs are read whole: `cmd | grep -q` can fail under pipefail when grep exits before cmd is done.
current() {
  local conf gres
  conf=$(scontrol show config 2>/dev/null) || return 1
  gres=$(sinfo -h -n localhost -o %G 2>/dev/null) || return 1
  [[ $conf =~ MaxArraySize[[:space:]]+=[[:space:]]+$MAX_ARRAY_SIZE[[:space:]] && $gres == *hpu:8* ]]
}

cmd_start() {
  if healthy; then log "cluster $CLUSTER already running and healthy"; return 0; fi
  local d any=""
  for d in $DAEMONS; do running "$d" && any=1; done
  [[ -n $any ]] && { log "cluster partly running: restarting"; cmd_stop; }

  install_packages
  mkdir -p "$LOG" "$RUN" "$STATE/slurmctld" "$STATE/slurmd"
  rm -f "$RUN"/*.pid "$LOG"/*.log   # fresh logs, so failure tails show this start only
  write_configs
  start_munge
  start_mariadb

  launch_slurm slurmdbd
  wait_for slurmdbd sacctmgr -n show cluster
  # The cluster must exist in the database before accounts can be associated with it.
  sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null

  launch_slurm slurmctld
  wait_for slurmctld scontrol ping
  launch_slurm slurmd -N localhost
  wait_for "node localhost to be idle" sh -c "sinfo -h -n localhost -o %t | grep -Eq '^(idle|mix|alloc)'"
  wait_for sacct sacct -n -X

  add_account "$ACCOUNT" "$MAX_SUBMIT"
  add_account "$SMALL_ACCOUNT" "$SMALL_SUBMIT"
  sacctmgr -n -P show user root format=defaultaccount | grep -qx "$ACCOUNT" ||
    sacctmgr -i modify user root set DefaultAccount="$ACCOUNT" >/dev/null
  log "cluster $CLUSTER up (state and logs in $STATE)"
}

cmd_stop() {
  local d pid i
  # Cancel leftover jobs first so no slurmstepd outlives slurmd.
  if running slurmctld && [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
    squeue -h -o %A | xargs -r scancel --quiet 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break; sleep 1; done
  fi
  for d in $(echo "$DAEMONS" | tr ' ' '\n' | tac); do
    running "$d" || { rm -f "$RUN/$d.pid"; continue; }
    pid=$(cat "$RUN/$d.pid" 2>/dev/null) || continue   # it may remove its pid file as it exits
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do running "$d" || break; sleep 0.1; done   # 30 s for a clean exit
    running "$d" && { log "WARNING: $d (pid $pid) ignored SIGTERM, killing"; kill -KILL "$pid" 2>/dev/null || true; sleep 1; }
    rm -f "$RUN/$d.pid"
  done
  log "stopped"
}

cmd_status() {
  local d
  for d in $DAEMONS; do
    if running "$d"; then echo "$d: running (pid $(cat "$RUN/$d.pid"))"; else echo "$d: stopped"; fi
  done
  sinfo 2>/dev/null || echo "sinfo: controller unreachable"
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
