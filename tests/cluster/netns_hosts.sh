#!/usr/bin/env bash
# Makes "hosts" on this machine for integration tests that start daemons over ssh: each host is a
# Linux network namespace (and a UTS namespace, so that `hostname` names it) with an address of its
# own and a real OpenSSH server of its own. Needs root, ip, sshd and ssh (deploy/setup.sh).
#
#   netns_hosts.sh up STATE_DIR N     create N hosts (1..200) and start their sshds; prints their
#                                     addresses, one a line, once each sshd has let our key in
#   netns_hosts.sh down STATE_DIR     kill every process in the hosts, remove the namespaces, the
#                                     veths and the bridge; idempotent, never fails on missing
#                                     pieces
#
# Then `ssh -F STATE_DIR/ssh_config root@ADDR COMMAND` (scp -F too) runs COMMAND on a host, and
# `ip netns exec NS COMMAND` does without ssh (NS: line i of STATE_DIR/netns is host i's).
#
# The network: a bridge here at A.B.C.254/24 and host i at A.B.C.i on its eth0, a veth to the
# bridge; the hosts reach each other and are reached from here. A.B.C is $NETNS_HOSTS_SUBNET if set
# (say 10.213.7), else the first 10.213.X that no address or route here uses. In a host lo is up
# (the host's own address needs it) but has neither 127.0.0.1 nor ::1: a daemon that listens on or
# dials loopback fails there as it would between real machines.
#
# Names carry a 5-hex-digit id, picked free at `up`, so that several sets of hosts can be up at
# once: bridge nh<id>br, namespace and hostname nh-<id>-h<i>, veth nh<id>h<i>. STATE_DIR holds hosts
# (the addresses, one a line), netns (the namespaces, same order), ssh_config, known_hosts, the
# client key id_ed25519, authorized_keys, and per host hostI/ with its host key, sshd_config,
# sshd.pid and sshd.log. `down` leaves the keys, the configs and the logs, and removes the rest.
#
# A command over ssh runs in its host's namespaces, as root, in /root, through root's login shell
# (bash reads /root/.bashrc first), with none of the caller's environment: give it absolute paths or
# `cd` first, and its variables on the command line. The hosts share this machine's filesystems and
# process ids. A daemon started over ssh must let go of ssh's stdin, stdout and stderr
# (`nohup CMD </dev/null >LOG 2>&1 &`), or ssh waits for it to end. `down` kills it.
set -euo pipefail

readonly SSHD=${NETNS_HOSTS_SSHD:-/usr/sbin/sshd}  # another binary only to test failures of `up`
readonly READY_TRIES=100    # x 0.1 s: how long `up` waits for each sshd to listen
readonly STOP_TRIES=50      # x 0.1 s: how long `down` waits after SIGTERM before SIGKILL
readonly LOCK=/run/lock/netns_hosts.lock  # held while `up` picks its id and subnet

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

log() { echo "netns_hosts: $*" >&2; }

# Fails `up`: the EXIT trap that `cmd_up` sets prints why and removes what `up` made.
fail() {
  FAIL_MSG=$*
  exit 1
}

# Whether process $1 exists and is not a zombie.
alive() {
  local stat
  [[ -n "${1:-}" ]] && read -r stat <"/proc/$1/stat" 2>/dev/null || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

# Sends TERM to PIDS, waits up to STOP_TRIES x 0.1 s for them to exit, then sends KILL.
stop_pids() {
  (($#)) || return 0
  local i p left
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < STOP_TRIES + 20; i++)); do
    ((i == STOP_TRIES)) && { kill -KILL "$@" 2>/dev/null || true; }
    left=0
    for p in "$@"; do alive "$p" && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
}

# Whether anything here has an address or a route in A.B.C.0/24 ($1 = A.B.C).
subnet_used() {
  local net=${1//./\\.}
  ip -4 -o addr show | grep -q " inet $net\." ||
    ip -4 route show table all | grep -Eq "(^| )$net\."
}

# Picks ID, whose names no link or namespace here has, and NET, a /24 that nothing here uses;
# records ID in STATE/netns_hosts.id for `down`, and creates the bridge: under a lock, so that two
# `up`s at once pick different ones (the bridge claims both once the lock is let go).
make_bridge() {
  mkdir -p "$(dirname "$LOCK")"
  exec 9>"$LOCK"
  flock -w 30 9 || fail "cannot lock $LOCK"
  local seed i x
  seed=$(echo "$STATE $$" | cksum | cut -d' ' -f1)
  ID=""
  for ((i = 0; i < 1000; i++)); do
    x=$(printf '%05x' $(((seed + i * 7919) & 0xfffff)))
    ip link show "nh${x}br" >/dev/null 2>&1 && continue
    ip netns list | grep -q "^nh-$x-" && continue
    ip -o link show | grep -q ": nh${x}h[0-9]*[@:]" && continue
    ID=$x
    break
  done
  [[ -n "$ID" ]] || fail "found no free id for the names"
  NET=""
  if [[ -n "${NETNS_HOSTS_SUBNET:-}" ]]; then
    [[ "$NETNS_HOSTS_SUBNET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] ||
      fail "NETNS_HOSTS_SUBNET must be A.B.C (a /24), not '$NETNS_HOSTS_SUBNET'"
    subnet_used "$NETNS_HOSTS_SUBNET" && fail "$NETNS_HOSTS_SUBNET.0/24 is in use here"
    NET=$NETNS_HOSTS_SUBNET
  else
    for ((i = 0; i < 254; i++)); do
      x=10.213.$(((16#$ID + i) % 254 + 1))
      subnet_used "$x" || { NET=$x; break; }
    done
    [[ -n "$NET" ]] || fail "every 10.213.X.0/24 is in use here; set NETNS_HOSTS_SUBNET"
  fi
  BRIDGE=nh${ID}br
  echo "$ID" >"$STATE/netns_hosts.id"
  ip link add "$BRIDGE" type bridge || fail "cannot create bridge $BRIDGE"
  ip addr add "$NET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  exec 9>&-
}

# Creates host $1: namespace, veth to the bridge, address, a lo without loopback addresses.
make_host() {
  local i=$1
  local ns=nh-$ID-h$i veth=nh${ID}h$i addr=$NET.$i err
  ip netns add "$ns" || fail "cannot create network namespace $ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$BRIDGE" up
  # Bringing lo up gives it 127.0.0.1/8 and ::1: take them away, keep lo for the host's own address
  # (traffic to it goes through lo).
  ip -n "$ns" link set lo up
  ip -n "$ns" addr del 127.0.0.1/8 dev lo
  if ip -n "$ns" -6 addr show dev lo | grep -q ' ::1/'; then
    ip -n "$ns" addr del ::1/128 dev lo
  fi
  # No default route: with one, 127.0.0.1 is routed to the bridge, and a connection to it hangs
  # for minutes (SYN retries) rather than failing at once.
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  if ip -n "$ns" -o addr show | grep -Eq ' inet6? (127\.|::1/)'; then
    fail "$ns still has a loopback address: $(ip -n "$ns" -o addr show dev lo)"
  fi
  if err=$(ip netns exec "$ns" bash -c 'exec 3<>/dev/tcp/127.0.0.1/22' 2>&1); then
    fail "in $ns a connection to 127.0.0.1:22 succeeded"
  fi
  [[ "$err" == *"Network is unreachable"* ]] ||
    fail "in $ns a connection to 127.0.0.1 failed, but not for want of a route: $err"
}

write_configs() {
  local i addr dir
  : >"$STATE/known_hosts"
  for ((i = 1; i <= N; i++)); do
    addr=$NET.$i
    dir=$STATE/host$i
    mkdir -p "$dir"
    rm -f "$dir"/ssh_host_ed25519_key{,.pub} "$dir"/sshd.{pid,log}
    ssh-keygen -q -t ed25519 -N '' -C "netns_hosts host $i" -f "$dir/ssh_host_ed25519_key" \
      </dev/null
    echo "$addr $(cut -d' ' -f1,2 "$dir/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
    cat >"$dir/sshd_config" <<EOF
# Generated by tests/cluster/netns_hosts.sh for host $i (nh-$ID-h$i) under $STATE.
ListenAddress $addr
Port 22
AddressFamily inet
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# STATE_DIR is the caller's (a mktemp dir, say): do not insist on sshd's rules for its modes.
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
# Tests open many sessions at once; the default 10:30:100 drops some of them.
MaxStartups 200:30:400
MaxSessions 100
# scp of OpenSSH 9 speaks sftp.
Subsystem sftp internal-sftp
LogLevel INFO
EOF
  done
  cat >"$STATE/ssh_config" <<EOF
# Generated by tests/cluster/netns_hosts.sh for the hosts under $STATE:
#   ssh -F $STATE/ssh_config root@ADDR COMMAND
Host *
  User root
  Port 22
  IdentityFile $STATE/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $STATE/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  UpdateHostKeys no
  CheckHostIP no
  BatchMode yes
  ConnectTimeout 5
  ConnectionAttempts 1
  ForwardAgent no
  ForwardX11 no
  ControlMaster no
  ControlPath none
  LogLevel ERROR
EOF
}

# Whether an sshd answers with its banner at $1:22.
sshd_listens() {
  # shellcheck disable=SC2016
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/22" && read -r -t 1 line <&3 && [[ $line == SSH-* ]]' \
    "$1" 2>/dev/null
}

dump_logs() {
  local f
  for f in "$STATE"/host*/sshd.log; do
    [[ -s "$f" ]] || continue
    echo "----- $f (last 20 lines)"
    tail -n 20 "$f"
  done >&2
}

on_up_exit() {
  local rc=$?
  ((UP_DONE)) && return 0
  ((rc)) || rc=1
  log "up failed: ${FAIL_MSG:-"exit status $rc"}; removing what it made"
  dump_logs
  cmd_down >/dev/null 2>&1 || true
  exit "$rc"
}

cmd_up() {
  if ! [[ "$N" =~ ^[1-9][0-9]{0,2}$ ]] || ((N > 200)); then
    log "N must be 1..200, not '$N'"
    exit 2
  fi
  [[ $(id -u) -eq 0 ]] || { log "must run as root"; exit 2; }
  local cmd
  for cmd in ip ssh ssh-keygen flock unshare "$SSHD"; do
    command -v "$cmd" >/dev/null || { log "$cmd is missing: run deploy/setup.sh"; exit 2; }
  done
  mkdir -p "$STATE"
  STATE=$(cd "$STATE" && pwd)
  if [[ -n "$(sshd_pids)" ]]; then
    log "hosts are already up under $STATE: run down first"
    exit 1
  fi
  cmd_down  # what a killed `up` may have left

  UP_DONE=0
  FAIL_MSG=""
  trap on_up_exit EXIT
  trap 'FAIL_MSG="interrupted"; exit 130' INT TERM HUP
  # An unexpected failure says which command it was.
  set -E
  trap 'FAIL_MSG="line $LINENO: \"$BASH_COMMAND\" failed"' ERR

  rm -f "$STATE"/{id_ed25519,id_ed25519.pub,authorized_keys,hosts,netns}
  ssh-keygen -q -t ed25519 -N '' -C "netns_hosts client" -f "$STATE/id_ed25519" </dev/null
  cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"

  make_bridge
  local i
  for ((i = 1; i <= N; i++)); do make_host "$i"; done
  write_configs

  # sshd's privilege-separated children chroot to /run/sshd.
  mkdir -p /run/sshd
  chmod 0755 /run/sshd
  local ns dir
  for ((i = 1; i <= N; i++)); do
    ns=nh-$ID-h$i
    dir=$STATE/host$i
    # sshd checks its config, forks into the background and exits; the child then listens and
    # writes its pid file. `unshare --uts` gives the host a hostname of its own.
    # shellcheck disable=SC2016
    ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$ns" \
      "$SSHD" -f "$dir/sshd_config" -E "$dir/sshd.log" </dev/null ||
      fail "sshd of $ns did not start"
  done

  local tries pid
  for ((i = 1; i <= N; i++)); do
    dir=$STATE/host$i
    for ((tries = 0; ; tries++)); do
      sshd_listens "$NET.$i" && break
      ((tries < READY_TRIES)) || fail "sshd of host $i does not listen at $NET.$i:22"
      pid=$(cat "$dir/sshd.pid" 2>/dev/null || true)
      if grep -q 'fatal' "$dir/sshd.log" 2>/dev/null || { [[ -n "$pid" ]] && ! alive "$pid"; }; then
        fail "sshd of host $i exited"
      fi
      sleep 0.1
    done
  done

  # Our key, the known host keys and the config work: one ssh per host, all at once. It asks for
  # the sftp subsystem, not a command, so that no shell runs (root's ~/.bashrc may take seconds).
  local pids=()
  for ((i = 1; i <= N; i++)); do
    ssh -F "$STATE/ssh_config" -s "root@$NET.$i" sftp </dev/null 2>"$STATE/host$i/ssh_check.err" &
    pids+=($!)
  done
  for ((i = 1; i <= N; i++)); do
    wait "${pids[i - 1]}" ||
      fail "ssh to host $i ($NET.$i) failed: $(cat "$STATE/host$i/ssh_check.err")"
    rm -f "$STATE/host$i/ssh_check.err"
  done

  for ((i = 1; i <= N; i++)); do
    echo "$NET.$i" >>"$STATE/hosts"
    echo "nh-$ID-h$i" >>"$STATE/netns"
  done
  UP_DONE=1
  trap - EXIT INT TERM HUP ERR
  cat "$STATE/hosts"
}

# Prints the pids in STATE/host*/sshd.pid of the sshds that are alive. A pid is one of ours if that
# process is an sshd of one of our configs (sshd keeps its arguments in its title).
sshd_pids() {
  local f pid
  for f in "$STATE"/host*/sshd.pid; do
    [[ -e "$f" ]] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! alive "$pid"; then continue; fi
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-f $STATE/host"; then
      echo "$pid"
    fi
  done
}

cmd_down() {
  [[ -d "$STATE" ]] || return 0
  STATE=$(cd "$STATE" && pwd)
  local id pids=()
  id=$(cat "$STATE/netns_hosts.id" 2>/dev/null || true)
  [[ "$id" =~ ^[0-9a-f]{5}$ ]] || id=""

  # The sshds first, so that no session starts while the rest is killed.
  # shellcheck disable=SC2046
  stop_pids $(sshd_pids)

  # Then whatever else runs in the hosts (sessions, daemons started over ssh), then the namespaces
  # (each takes its veth with it), then the veths left of a namespace someone else removed, and the
  # bridge.
  if [[ -n "$id" ]]; then
    local namespaces ns
    namespaces=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^nh-$id-h[0-9]+$" || true)
    pids=()
    for ns in $namespaces; do
      # shellcheck disable=SC2207
      pids+=($(ip netns pids "$ns" 2>/dev/null || true))
    done
    stop_pids "${pids[@]}"
    for ns in $namespaces; do ip netns del "$ns" 2>/dev/null || true; done
    local veth
    for veth in $(ip -o link show 2>/dev/null | sed -n "s/^[0-9]*: \(nh${id}h[0-9]*\)@.*/\1/p"); do
      ip link del "$veth" 2>/dev/null || true
    done
    ip link del "nh${id}br" 2>/dev/null || true
  fi
  rm -f "$STATE"/host*/sshd.pid "$STATE/hosts" "$STATE/netns" "$STATE/netns_hosts.id"
  return 0
}

main() {
  (($# >= 2)) || usage
  STATE=$2
  case "$1" in
    up)
      (($# == 3)) || usage
      N=$3
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
