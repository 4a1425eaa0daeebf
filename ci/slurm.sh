#!/usr/bin/env bash
# Slurm cluster on this machine for the test-suite (Debian 12, root, no systemd): node `localhost`, plus
# partition `multi` of MULTI_COUNT nodes that are separate hosts on a network (one network, UTS and mount
# namespace per slurmd, each with its own address on a bridge this script makes; see ci/README.md).
#   ci/slurm.sh start   install if missing, start munged, mariadbd, slurmdbd, slurmctld, slurmd, the multi nodes
#   ci/slurm.sh stop    stop them by recorded pid, remove the namespaces and the bridge (never fails)
#   ci/slurm.sh status  which daemons run, plus sinfo
#   ci/slurm.sh node-stop NODE | node-start NODE   kill / start one multi node (the fault tests)
#   ci/slurm.sh ctld-snapshot   stop slurmctld cleanly (its state saved), keep a copy of that state, start it again
#   ci/slurm.sh ctld-crash      kill -9 slurmctld, put back the state of the last snapshot, start it: every job
#                               submitted since is lost and its job id is issued again (the restart fault test)
# The cluster is machine-wide: while a .ci/run holds the machine's test lock (ci/lock.sh), every command but status
# is refused to anyone outside that run.
set -euo pipefail
source "$(dirname "$0")/lock.sh"

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
# The multi nodes: NODE_PREFIX1.., each in a network namespace of that name with address NET.(10+i) on bridge
# BRIDGE (NET.1: the controller's address, on the bridge). Only interfaces and addresses made here are touched:
# the bridge and one veth pair per node (the host end on the bridge, the other end inside the node's namespace).
MULTI_COUNT=3                   # a 2-node point still runs with one of them lost (the fault test)
NODE_PREFIX=asx-n
NODE_CPUS=4                     # claimed (config_overrides), like localhost's 16
NODE_MEM=4000
NODE_CARDS=2                    # gpu:h100:2 and hpu:2 per node, so cards=4 spans 2 nodes
NET=10.231.77
BRIDGE=asxbr0
NODES_DIR=$STATE/nodes          # per node: spool, run, log (its own disk: bind-mounted in its mount namespace)

log() { echo "[ci/slurm] $*" >&2; }

tails() {
  local f
  for f in "$LOG"/*.log "$NODES_DIR"/*/log/*.log /var/log/munge/munged.log; do
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
  local pkgs="slurmctld slurmd slurm-client munge slurmdbd mariadb-server iproute2" missing=""
  local p
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=" $p"
  done
  [[ -z $missing ]] && return 0
  log "installing$missing (apt-get; a minute or more)"
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
SlurmctldHost=localhost($NET.1)
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
EOF
  # The multi nodes come before localhost: slurmctld takes any name for "localhost" while that is its only node
  # (node_conf.c), so a node line after it reads as a duplicate of it.
  local i
  for ((i = 1; i <= MULTI_COUNT; i++)); do
    echo "NodeName=$NODE_PREFIX$i NodeAddr=$NET.$((10 + i)) CPUs=$NODE_CPUS" \
      "RealMemory=$NODE_MEM Gres=gpu:h100:$NODE_CARDS,hpu:$NODE_CARDS State=UNKNOWN" >>/etc/slurm/slurm.conf
  done
  echo "NodeName=localhost CPUs=16 RealMemory=32000 Gres=gpu:h100:8,hpu:8 State=UNKNOWN" >>/etc/slurm/slurm.conf
  local p default
  for p in $PARTITIONS; do
    default=NO; [[ $p == debug ]] && default=YES
    echo "PartitionName=$p Nodes=localhost Default=$default MaxTime=02:00:00 State=UP" >>/etc/slurm/slurm.conf
  done
  echo "PartitionName=multi Nodes=$NODE_PREFIX[1-$MULTI_COUNT] Default=NO MaxTime=02:00:00 State=UP" \
    >>/etc/slurm/slurm.conf
  # Character devices: with plain files CUDA_VISIBLE_DEVICES stays empty, without File= the node drains.
  printf '%s\n' "NodeName=localhost Name=gpu Type=h100 File=/dev/fakegpu[0-7]" \
    "NodeName=localhost Name=hpu File=/dev/fakehpu[0-7]" \
    "NodeName=$NODE_PREFIX[1-$MULTI_COUNT] Name=gpu Type=h100 File=/dev/fakegpu[0-$((NODE_CARDS - 1))]" \
    "NodeName=$NODE_PREFIX[1-$MULTI_COUNT] Name=hpu File=/dev/fakehpu[0-$((NODE_CARDS - 1))]" >/etc/slurm/gres.conf
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

# ---- the multi nodes: separate hosts on a bridge ---------------------------------------------------------------
# Each node is a slurmd in its own network namespace (address NET.(10+i), its own port 6818), UTS namespace
# (hostname = node name, so gethostname() and gloo's address are the node's) and mount namespace, in which
# NODES_DIR/NODE/{spool,run,log} are bind-mounted over the spool, pid and log directories of slurm.conf (each
# node has its own, as on separate hosts) and NODES_DIR/hosts over /etc/hosts: the node names resolve inside the
# nodes (MASTER_ADDR is the allocation's first hostname) without touching this machine's /etc/hosts.

nodes() { local i; for ((i = 1; i <= MULTI_COUNT; i++)); do echo "$NODE_PREFIX$i"; done; }

# node_running NODE: its slurmd's recorded pid is alive.
node_running() { RUN=$NODES_DIR/$1/run running slurmd; }

node_alive() { sinfo -h -n "$1" -o %t 2>/dev/null | grep -Eq '^(idle|mix|alloc)'; }

net_up() {
  local i node
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  [[ $(ip -4 addr show dev "$BRIDGE") == *"inet $NET.1/24"* ]] || ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  {
    echo "127.0.0.1 localhost"
    echo "$NET.1 accelsweep-ctl"
    for ((i = 1; i <= MULTI_COUNT; i++)); do echo "$NET.$((10 + i)) $NODE_PREFIX$i"; done
  } >"$NODES_DIR/hosts"
  for ((i = 1; i <= MULTI_COUNT; i++)); do
    node=$NODE_PREFIX$i
    [[ -e /run/netns/$node ]] || ip netns add "$node"
    # a host end left from a namespace deleted a moment ago (the kernel frees the pair asynchronously) goes first
    if ! ip -n "$node" link show eth0 >/dev/null 2>&1; then
      ip link del "$node-h" 2>/dev/null || true
    fi
    if ! ip link show "$node-h" >/dev/null 2>&1; then
      ip link add "$node-h" type veth peer name eth0 netns "$node"
      ip link set "$node-h" master "$BRIDGE"
      ip -n "$node" addr add "$NET.$((10 + i))/24" dev eth0
    fi
    ip link set "$node-h" up
    ip -n "$node" link set lo up
    ip -n "$node" link set eth0 up
  done
}

net_down() {
  local node
  for node in $(nodes); do
    ip link del "$node-h" 2>/dev/null || true   # the veth pair, both ends
    [[ -e /run/netns/$node ]] && ip netns del "$node"
  done
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  return 0
}

node_start() {
  local node=$1 d=$NODES_DIR/$1
  node_running "$node" && { log "$node already running"; return 0; }
  mkdir -p "$d/spool" "$d/run" "$d/log"
  rm -f "$d/run/slurmd.pid"
  ip link set "$node-h" up
  # nsenter, not `ip netns exec`: that remounts /sys, which hides /sys/fs/cgroup from slurmd
  nsenter --net="/run/netns/$node" unshare --uts --mount --propagation private sh -ec "
    hostname $node
    mount --bind $NODES_DIR/hosts /etc/hosts
    mount --bind $d/spool $STATE/slurmd
    mount --bind $d/run $RUN
    mount --bind $d/log $LOG
    exec /usr/sbin/slurmd -N $node" || die "slurmd of $node failed to start"
  wait_for "$node pid file" test -s "$d/run/slurmd.pid"
}

# node_kill NODE: the host dies: its link goes down first (its peers get no FIN or RST, as from a host that lost
# power), then every process in its network namespace (slurmd, slurmstepd, the job's tasks) gets SIGKILL.
node_kill() {
  local node=$1 pids
  ip link set "$node-h" down 2>/dev/null || true
  pids=$(ip netns pids "$node" 2>/dev/null || true)
  # shellcheck disable=SC2086
  [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
  rm -f "$NODES_DIR/$node/run/slurmd.pid"
  return 0
}

nodes_stop() {
  local node pid i
  for node in $(nodes); do
    if node_running "$node" && pid=$(cat "$NODES_DIR/$node/run/slurmd.pid" 2>/dev/null); then
      kill -TERM "$pid" 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do node_running "$node" || break; sleep 0.1; done
    fi
    node_kill "$node"   # whatever is left in its namespace (slurmstepd, tasks)
  done
}

nodes_start() {
  local node
  mkdir -p "$NODES_DIR"
  net_up
  for node in $(nodes); do node_start "$node"; done
  for node in $(nodes); do
    wait_for "node $node to be idle" node_alive "$node"
  done
}

healthy() {
  local d node
  for d in $DAEMONS; do running "$d" || return 1; done
  for node in $(nodes); do node_running "$node" && node_alive "$node" || return 1; done
  sinfo -h -n localhost -o %t 2>/dev/null | grep -Eq '^(idle|mix|alloc)' && sacct -n -X >/dev/null 2>&1 &&
    current
}

# current: the running cluster has this script's configuration (else start restarts it).
# Outputs are read whole: `cmd | grep -q` can fail under pipefail when grep exits before cmd is done.
current() {
  local conf gres multi
  conf=$(scontrol show config 2>/dev/null) || return 1
  gres=$(sinfo -h -n localhost -o %G 2>/dev/null) || return 1
  multi=$(sinfo -h -p multi -N -o %N 2>/dev/null) || return 1
  [[ $conf =~ MaxArraySize[[:space:]]+=[[:space:]]+$MAX_ARRAY_SIZE[[:space:]] && $gres == *hpu:8* &&
     $conf =~ SlurmctldHost\[0\][[:space:]]+=[[:space:]]+[^[:space:]]*\($NET.1\) &&
     $(echo "$multi" | sort -u | wc -l) -eq $MULTI_COUNT ]]
}

# upgrade: the base daemons run but slurmctld has an older configuration (e.g. no multi nodes): write the new one
# and restart slurmctld and localhost's slurmd only. Slurm keeps queued and running jobs over these restarts
# (slurmctld's state save, slurmstepd outlives slurmd), so jobs running on localhost are not disturbed.
upgrade() {
  local d pid i
  log "cluster running with an older configuration: new configuration, restarting slurmctld and slurmd only"
  write_configs
  mkdir -p "$NODES_DIR"
  net_up   # slurmctld's address (on the bridge) before it starts
  for d in slurmctld slurmd; do
    pid=$(cat "$RUN/$d.pid" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do running "$d" || break; sleep 0.1; done
    running "$d" && die "$d (pid $pid) did not stop"
  done
  launch_slurm slurmctld
  wait_for slurmctld scontrol ping
  launch_slurm slurmd -N localhost
  wait_for "node localhost to be idle" sh -c "sinfo -h -n localhost -o %t | grep -Eq '^(idle|mix|alloc)'"
  local node
  for node in $(nodes); do   # the multi nodes' slurmd read the new configuration too (nodes_start starts them)
    pid=$(cat "$NODES_DIR/$node/run/slurmd.pid" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do node_running "$node" || break; sleep 0.1; done
  done
}

cmd_start() {
  if healthy; then log "cluster $CLUSTER already running and healthy"; return 0; fi
  local d any=""
  for d in $DAEMONS; do running "$d" && any=1; done
  if [[ -n $any ]]; then
    local all=1
    for d in $DAEMONS; do running "$d" || all=""; done
    if [[ -n $all ]] && sacct -n -X >/dev/null 2>&1; then
      current || upgrade
      nodes_start
      log "cluster $CLUSTER up (state and logs in $STATE)"
      return 0
    fi
    log "cluster partly running: restarting"; cmd_stop
  fi

  install_packages
  mkdir -p "$LOG" "$RUN" "$STATE/slurmctld" "$STATE/slurmd"
  rm -f "$RUN"/*.pid "$LOG"/*.log   # fresh logs, so failure tails show this start only
  write_configs
  log "starting munged and mariadbd"
  start_munge
  start_mariadb

  log "starting slurmdbd, slurmctld and the slurmd of localhost"
  launch_slurm slurmdbd
  wait_for slurmdbd sacctmgr -n show cluster
  # The cluster must exist in the database before accounts can be associated with it.
  sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null

  mkdir -p "$NODES_DIR"
  net_up   # slurmctld's address (on the bridge) before it starts
  launch_slurm slurmctld
  wait_for slurmctld scontrol ping
  launch_slurm slurmd -N localhost
  wait_for "node localhost to be idle" sh -c "sinfo -h -n localhost -o %t | grep -Eq '^(idle|mix|alloc)'"
  wait_for sacct sacct -n -X
  log "starting the slurmd of the multi nodes ($(nodes | paste -sd ' '), each in its namespaces on $BRIDGE)"
  nodes_start

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
  nodes_stop
  for d in $(echo "$DAEMONS" | tr ' ' '\n' | tac); do
    running "$d" || { rm -f "$RUN/$d.pid"; continue; }
    pid=$(cat "$RUN/$d.pid" 2>/dev/null) || continue   # it may remove its pid file as it exits
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do running "$d" || break; sleep 0.1; done   # 30 s for a clean exit
    running "$d" && { log "WARNING: $d (pid $pid) ignored SIGTERM, killing"; kill -KILL "$pid" 2>/dev/null || true; sleep 1; }
    rm -f "$RUN/$d.pid"
  done
  net_down   # last: the bridge holds slurmctld's address
  log "stopped"
}

cmd_status() {
  local d
  for d in $DAEMONS; do
    if running "$d"; then echo "$d: running (pid $(cat "$RUN/$d.pid"))"; else echo "$d: stopped"; fi
  done
  for d in $(nodes); do
    if node_running "$d"; then echo "slurmd $d: running (pid $(cat "$NODES_DIR/$d/run/slurmd.pid"))"
    else echo "slurmd $d: stopped"; fi
  done
  sinfo 2>/dev/null || echo "sinfo: controller unreachable"
}

# ctld_stop SIGNAL: send slurmctld SIGNAL and wait until it is gone.
ctld_stop() {
  local pid i
  pid=$(cat "$RUN/slurmctld.pid") || die "slurmctld has no pid file"
  kill "-$1" "$pid"
  for ((i = 0; i < TIMEOUT * 10; i++)); do running slurmctld || return 0; sleep 0.1; done
  die "slurmctld (pid $pid) still running $TIMEOUT s after SIG$1"
}

# ctld_start: start slurmctld and wait until no node's state is still unknown (its slurmd has registered again;
# until then the plan-time check sees localhost as unusable).
ctld_start() {
  launch_slurm slurmctld
  wait_for slurmctld scontrol ping
  wait_for "nodes to register" sh -c "! sinfo -h -N -o %t | grep -q '^unk'"
}

SNAPSHOT=$STATE/slurmctld-snapshot

[[ ${1:-status} == status ]] || ci_guard "ci/slurm.sh $*"
case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  node-stop) node_kill "${2:?node-stop NODE}" ;;
  node-start) mkdir -p "$NODES_DIR"; net_up; node_start "${2:?node-start NODE}"
    wait_for "node $2 to be idle" node_alive "$2" ;;
  ctld-snapshot) ctld_stop TERM; rm -rf "$SNAPSHOT"; cp -a "$STATE/slurmctld" "$SNAPSHOT"; ctld_start ;;
  ctld-crash) [[ -d $SNAPSHOT ]] || die "no snapshot: run ctld-snapshot first"
    ctld_stop KILL; rm -rf "$STATE/slurmctld"; cp -a "$SNAPSHOT" "$STATE/slurmctld"; ctld_start ;;
  *) echo "usage: $0 start|stop|status|node-stop NODE|node-start NODE|ctld-snapshot|ctld-crash" >&2; exit 2 ;;
esac
