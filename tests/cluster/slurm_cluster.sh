#!/usr/bin/env bash
# Starts and stops a real Slurm cluster (Debian 12's slurm-wlm 22.05 and munge) on this machine, as
# root and without systemd, for integration tests that submit jobs with sbatch and srun.
#
#   slurm_cluster.sh up STATE_DIR [NODES]   start munged, slurmctld and NODES slurmd (default 1);
#                                           returns once every node is idle
#   slurm_cluster.sh down STATE_DIR         cancel every job, stop every daemon, remove the network
#                                           namespaces; idempotent, never fails on missing pieces
#
# Then `source STATE_DIR/env`: it exports SLURM_CONF, so that sbatch, srun, squeue, sinfo, scontrol
# and scancel talk to this cluster, and SLURM_CLUSTER_DIR, SLURM_CLUSTER_NODES (the node names, comma
# separated) and SLURM_CLUSTER_PARTITION.
#
# Everything lives under STATE_DIR: a fresh munge key and munged's socket, pid, seed and log files
# (munge/), slurm.conf, slurmctld's state (ctld/), each slurmd's spool (spool/NODE/), the daemons'
# logs (log/) and pid files (run/). Slurm's clients and daemons use that munge socket (AuthInfo), and
# the ports are picked free at each `up`, so neither a munged or slurmd started from Debian's
# packages nor a second cluster clashes. Outside STATE_DIR only the network namespaces
# (/run/netns/) and the bridge of NODES > 1 are made, and `down` removes them.
#
# One node is this host (`hostname -s`), its slurmd in this network namespace at 127.0.0.1. With
# NODES > 1 each node is a separate host: node1..nodeN, each slurmd in its own network and UTS
# namespace (so `srun hostname` prints the node's name), joined to the host by a veth pair on a
# bridge 10.2xx.y.0/24, with NodeAddr its own address; slurmctld listens on the bridge's address.
# (Debian's build has MULTIPLE_SLURMD, so slurmds on per-node ports of 127.0.0.1 would work too,
# but they would share one address and one hostname.)
#
# Plugins that need neither systemd nor a cgroup hierarchy of our own: proctrack/linuxproc,
# task/none, jobacct_gather/none, no accounting. Each node advertises SLURM_CLUSTER_CPUS CPUs
# (default 16, or nproc if more; SlurmdParameters=config_overrides lets it claim more than the
# machine has), so a job of 1 + S + W tasks fits on a small machine.
#
# Steps that run at the same time inside one allocation need `srun --overlap` (they share the
# allocation's CPUs and memory; the daemons of a job) or `srun --exact` (each takes only its own
# tasks' CPUs; add --mem=0 where the cluster tracks memory and the job asked for --mem): a plain
# srun step takes every CPU of the job and the next one waits. slurm_cluster_test.sh shows both.
#
# `down` cancels every job through Slurm, then sends SIGTERM (SIGKILL after 5 s) to the slurmds,
# slurmctld, any process still holding a file under STATE_DIR/log open (a slurmstepd whose slurmd
# is gone) with its descendants, and munged last. Needs root, iproute2 and util-linux.
set -euo pipefail

readonly CLUSTER_NAME=pstest
readonly PARTITION=main
readonly READY_TRIES=300     # x 0.2 s: how long `up` waits for a daemon or for idle nodes
readonly STOP_TRIES=50       # x 0.1 s: how long `down` waits after SIGTERM before SIGKILL

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

log() { echo "slurm_cluster: $*" >&2; }

# Prints a TCP port in [lo, hi) that nothing on this host listens on or connects from, other than
# the ports given after hi.
free_port() {
  local lo=$1 hi=$2
  shift 2
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((lo + (RANDOM * 32768 + RANDOM + $$) % (hi - lo)))
    [[ " $* " == *" $p "* ]] && continue
    if [[ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ]]; then
      echo "$p"
      return 0
    fi
  done
  log "no free port in [$lo, $hi)"
  return 1
}

# Whether process $1 exists and is not a zombie (a killed child that its parent has not reaped).
alive() {
  local stat
  [[ -n "${1:-}" ]] && read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

# The pid that `start` recorded for NAME if that process still runs and names STATE on its command
# line (so not a process that has reused the pid), or nothing.
pid_of() {
  local pid
  pid=$(cat "$STATE/run/$1.harness-pid" 2>/dev/null) || return 0
  if alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE"; then
    echo "$pid"
  fi
  return 0
}

# Starts "$@" in the background in STATE, output to log/NAME.out, and records its pid as NAME.
start() {
  local name=$1
  shift
  (cd "$STATE" && exec "$@") </dev/null >>"$STATE/log/$name.out" 2>&1 &
  echo $! >"$STATE/run/$name.harness-pid"
}

dump_logs() {
  local f
  for f in "$STATE"/log/* "$STATE"/munge/munged.log; do
    [[ -s "$f" ]] || continue
    echo "----- $f (last 30 lines)"
    tail -n 30 "$f"
  done >&2
}

# Fails `up`: prints why and the logs' tails, stops whatever started, exits 1. In a subshell (a
# command substitution that failed), only exits: the shell that ran `up` sees the failure.
die() {
  [[ $BASHPID -eq $$ ]] || exit 1
  trap - ERR
  log "up failed: $*"
  dump_logs
  cmd_down >/dev/null 2>&1 || true
  exit 1
}

# Polls COMMAND (a string for eval) every 0.2 s until it succeeds, READY_TRIES times at most; fails
# early when a recorded daemon has died.
wait_for() {
  local what=$1 cond=$2 i name
  for ((i = 0; i < READY_TRIES; i++)); do
    if eval "$cond" >/dev/null 2>&1; then
      return 0
    fi
    for name in "${DAEMONS[@]}"; do
      [[ -n "$(pid_of "$name")" ]] || die "$name exited while waiting for $what"
    done
    sleep 0.2
  done
  die "timed out waiting for $what"
}

all_nodes_idle() {
  local states
  states=$(SLURM_CONF="$STATE/slurm.conf" sinfo -h -N -o '%t' 2>/dev/null) || return 1
  [[ $(grep -cx 'idle' <<<"$states") -eq $NODES ]]
}

# Creates a bridge on 10.X.Y.1/24 and, for node i, namespace NS with a veth at 10.X.Y.(10+i).
# Records every name in STATE/netns so that `down` removes them. Sets BRIDGE_ADDR, NODE_ADDRS.
make_network() {
  local id octets net="" i ns veth
  id=$(($$ % 100000))
  for ((i = 0; i < 50; i++)); do
    octets="$((200 + (id + i) % 50)).$(((id / 50 + i * 7) % 250 + 1))"
    if ! ip -4 -o addr show | grep -q " 10\.$octets\." &&
      ! ip -4 route show | grep -q "^10\.$octets\."; then
      net=10.$octets
      break
    fi
  done
  [[ -n "$net" ]] || die "no free 10.2xx.y.0/24 subnet for the bridge"
  BRIDGE=slbr$id
  ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE"
  echo "bridge $BRIDGE" >>"$STATE/netns"
  ip addr add "$net.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  BRIDGE_ADDR=$net.1
  NODE_ADDRS=()
  for ((i = 1; i <= NODES; i++)); do
    ns=slurm-$id-node$i
    veth=slv${id}n$i
    ip netns add "$ns" || die "cannot create network namespace $ns"
    echo "netns $ns" >>"$STATE/netns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    NODE_ADDRS+=("$net.$((10 + i))")
  done
}

write_slurm_conf() {
  local ctld_host=$1 ctld_addr=$2
  shift 2
  local cpus mem i
  cpus=${SLURM_CLUSTER_CPUS:-$(($(nproc) > 16 ? $(nproc) : 16))}
  mem=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' || true)
  mem=${mem:-1024}
  cat >"$STATE/slurm.conf" <<EOF
# Generated by tests/cluster/slurm_cluster.sh for a test cluster under $STATE.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$ctld_host($ctld_addr)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
PlugStackConfig=$STATE/plugstack.conf
# No systemd, no cgroup hierarchy of our own: track processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Trust the CPU counts below rather than the hardware's.
SlurmdParameters=config_overrides
PropagateResourceLimits=NONE
ReturnToService=2
MailProg=/bin/true
# Short waits, so that cancelled jobs and \`down\` finish quickly.
KillWait=5
MinJobAge=4
SlurmdTimeout=30
InactiveLimit=0
EOF
  for ((i = 0; i < NODES; i++)); do
    echo "NodeName=${NODE_NAMES[i]} NodeHostname=${NODE_NAMES[i]} NodeAddr=$1 CPUs=$cpus" \
      "RealMemory=$mem State=UNKNOWN" >>"$STATE/slurm.conf"
    shift
  done
  echo "PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP" \
    >>"$STATE/slurm.conf"
  : >"$STATE/plugstack.conf"
}

cmd_up() {
  [[ "$NODES" =~ ^[1-9][0-9]?$ ]] || { log "NODES must be 1..99, not '$NODES'"; exit 2; }
  [[ $(id -u) -eq 0 ]] || { log "must run as root"; exit 2; }
  mkdir -p "$STATE"
  STATE=$(cd "$STATE" && pwd)
  [[ "$STATE" != *[[:space:]\'\"]* ]] || { log "STATE_DIR must not hold spaces or quotes"; exit 2; }
  mkdir -p "$STATE"/{munge,ctld,spool,log,run}
  local name
  for name in "$STATE"/run/*.harness-pid; do
    [[ -e "$name" ]] || continue
    name=${name##*/}
    [[ -z "$(pid_of "${name%.harness-pid}")" ]] ||
      { log "a cluster is already running under $STATE"; exit 1; }
  done
  [[ ! -f "$STATE/netns" ]] || cmd_down # namespaces of an `up` that was killed half way
  rm -f "$STATE/env" "$STATE"/run/* "$STATE"/log/*
  DAEMONS=()
  # Whatever fails from here on stops what has started.
  set -E
  trap 'die "line $LINENO failed"' ERR

  # munge: a key of our own, a socket of our own. munged insists on safe permissions.
  chmod 755 "$STATE" "$STATE/munge"
  rm -f "$STATE/munge/munge.key"
  mungekey --create --keyfile="$STATE/munge/munge.key" 2>>"$STATE/log/mungekey.out" ||
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$STATE/munge/munge.key"
  local sock=$STATE/munge/munge.socket
  start munged munged --foreground --force --socket="$sock" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
    --seed-file="$STATE/munge/munged.seed"
  DAEMONS+=(munged)
  wait_for "munged" "munge --no-input --socket='$sock' | unmunge --socket='$sock'"

  CTLD_PORT=$(free_port 10000 30000) || die "no port"
  SLURMD_PORT=$(free_port 10000 30000 "$CTLD_PORT") || die "no port"
  local host ctld_addr addrs=()
  host=$(hostname -s)
  NODE_NAMES=()
  if ((NODES == 1)); then
    NODE_NAMES=("$host")
    ctld_addr=127.0.0.1
    addrs=(127.0.0.1)
  else
    make_network
    for ((i = 1; i <= NODES; i++)); do NODE_NAMES+=("node$i"); done
    ctld_addr=$BRIDGE_ADDR
    addrs=("${NODE_ADDRS[@]}")
  fi
  write_slurm_conf "$host" "$ctld_addr" "${addrs[@]}"
  local conf=$STATE/slurm.conf

  start slurmctld slurmctld -D -c -f "$conf"
  DAEMONS+=(slurmctld)
  wait_for "slurmctld" "SLURM_CONF='$conf' scontrol ping | grep -q UP"

  local i ns node
  for ((i = 0; i < NODES; i++)); do
    node=${NODE_NAMES[i]}
    mkdir -p "$STATE/spool/$node"
    if ((NODES == 1)); then
      start "slurmd-$node" slurmd -D -f "$conf" -N "$node"
    else
      ns=$(sed -n "s/^netns \(.*-node$((i + 1))\)$/\1/p" "$STATE/netns")
      # Not `ip netns exec`: it remounts /sys, without the cgroup mounts that slurmd wants to see.
      # nsenter, unshare and sh all exec: the recorded pid is slurmd's.
      # shellcheck disable=SC2016
      start "slurmd-$node" nsenter --net="/run/netns/$ns" unshare --uts -- \
        sh -c 'hostname "$0" && exec "$@"' "$node" slurmd -D -f "$conf" -N "$node"
    fi
    DAEMONS+=("slurmd-$node")
  done
  wait_for "$NODES idle node(s)" all_nodes_idle

  local nodelist
  nodelist=$(IFS=,; echo "${NODE_NAMES[*]}")
  cat >"$STATE/env" <<EOF
# Source me: Slurm's clients then talk to the test cluster under $STATE.
export SLURM_CONF=$conf
export SLURM_CLUSTER_DIR=$STATE
export SLURM_CLUSTER_NODES=$nodelist
export SLURM_CLUSTER_PARTITION=$PARTITION
EOF
  trap - ERR
  log "up: $NODES node(s) ($nodelist) idle; slurmctld port $CTLD_PORT; source $STATE/env"
}

# Prints the pids of this cluster's processes and of their descendants (the tasks that a slurmstepd
# started). A process is the cluster's when it holds a file under STATE/log open: every daemon's
# output goes there, and each slurmstepd keeps its slurmd's log file open (slurmstepd overwrites its
# environment, so a marker there would not survive).
cluster_pids() {
  local roots
  roots=$(find /proc/[0-9]*/fd -maxdepth 1 -lname "$STATE/log/*" 2>/dev/null | cut -d/ -f3 |
    sort -u | grep -vx -e "$$" -e "$BASHPID" || true)
  [[ -n "$roots" ]] || return 0
  local -A children=()
  local p pp
  while read -r p pp; do children[$pp]+=" $p"; done < <(ps -e -o pid=,ppid=)
  local -A seen=()
  # shellcheck disable=SC2206
  local queue=($roots)
  while ((${#queue[@]})); do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -n "${seen[$p]:-}" ]] && continue
    seen[$p]=1
    # shellcheck disable=SC2206
    queue+=(${children[$p]:-})
  done
  echo "${!seen[@]}"
}

# Sends TERM to PIDS, waits up to STOP_TRIES x 0.1 s for them to exit, then sends KILL.
stop_pids() {
  local pids=("$@") i p left
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < STOP_TRIES; i++)); do
    left=0
    for p in "${pids[@]}"; do alive "$p" && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    left=0
    for p in "${pids[@]}"; do alive "$p" && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
}

cmd_down() {
  [[ -d "$STATE" ]] || return 0
  STATE=$(cd "$STATE" && pwd)
  local conf=$STATE/slurm.conf i

  # Jobs first, through Slurm, so that their steps end as they would on a real cluster.
  if [[ -f "$conf" && -n "$(pid_of slurmctld)" ]]; then
    local jobs
    jobs=$(SLURM_CONF="$conf" timeout 10 squeue -h -o %i 2>/dev/null || true)
    if [[ -n "$jobs" ]]; then
      # shellcheck disable=SC2086
      SLURM_CONF="$conf" timeout 10 scancel $jobs 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do
        [[ -z "$(SLURM_CONF="$conf" timeout 5 squeue -h -o %i 2>/dev/null || true)" ]] && break
        sleep 0.1
      done
    fi
  fi

  # Then slurmctld (it stops its slurmscriptd; before the slurmds, or it would wait for their
  # answers to its last messages), the slurmds, the steps that are left, and munged last: the others
  # use it.
  # shellcheck disable=SC2046
  stop_pids $(pid_of slurmctld)
  local name slurmds=()
  for name in "$STATE"/run/slurmd-*.harness-pid; do
    [[ -e "$name" ]] || continue
    name=${name##*/}
    slurmds+=("$(pid_of "${name%.harness-pid}")")
  done
  # shellcheck disable=SC2068
  stop_pids ${slurmds[@]}
  # shellcheck disable=SC2046
  stop_pids $(cluster_pids | tr ' ' '\n' | grep -vxF "$(pid_of munged)" || true)
  # shellcheck disable=SC2046
  stop_pids $(pid_of munged)
  # shellcheck disable=SC2046
  stop_pids $(cluster_pids)

  # The network: what is left in each namespace, then the namespace (its veth goes with it).
  if [[ -f "$STATE/netns" ]]; then
    local kind obj
    while read -r kind obj; do
      [[ "$kind" == netns ]] || continue
      # shellcheck disable=SC2046
      stop_pids $(ip netns pids "$obj" 2>/dev/null || true)
      ip netns del "$obj" 2>/dev/null || true
    done <"$STATE/netns"
    while read -r kind obj; do
      [[ "$kind" == bridge ]] && { ip link del "$obj" 2>/dev/null || true; }
    done <"$STATE/netns"
    rm -f "$STATE/netns"
  fi
  rm -f "$STATE"/run/*.harness-pid "$STATE/munge/munge.socket" "$STATE/munge/munge.socket.lock"
  return 0
}

main() {
  (($# >= 2)) || usage
  STATE=$2
  case "$1" in
    up)
      (($# <= 3)) || usage
      NODES=${3:-1}
      cmd_up
      ;;
    down)
      (($# == 2)) || usage
      cmd_down || true
      ;;
    *) usage ;;
  esac
}

main "$@"
