#!/usr/bin/env bash
# Self-test of netns_hosts.sh: brings 3 hosts up in a temporary directory, checks what integration
# tests need of them, brings them down and checks that nothing of them is left. Needs root and
# deploy/setup.sh's openssh-server, openssh-client and iproute2. Several may run at once.
#
#   tests/cluster/netns_hosts_test.sh
#
# Checks, each with a deadline rather than a sleep:
#   - `up` prints 3 addresses, those of STATE/hosts;
#   - ssh from here to host 1 runs `hostname` there (it prints host 1's name), and ssh from inside
#     host 1 to host 2 works too;
#   - a command over ssh runs in its host's network namespace: its `ip -o addr` shows that host's
#     address and no other, and /proc/self/ns/net is the host's namespace;
#   - no host has 127.0.0.1 or ::1, and a TCP connection to 127.0.0.1 fails there, while a daemon
#     that ssh started in host 2, listening on 0.0.0.0, is reached at host 2's address from host 1
#     and from host 2 itself;
#   - a second `up` of the same directory fails and leaves the hosts as they were;
#   - `down` kills that daemon and every sshd and removes the namespaces, veths and bridge; `down`
#     twice is fine;
#   - an `up` whose sshd fails exits non-zero saying so, and leaves nothing behind.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hosts_sh=$here/netns_hosts.sh
deadline_s=30

state=$(mktemp -d)
cleanup() {
  "$hosts_sh" down "$state" || true
  rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*" >&2
  for f in "$state"/host*/sshd.log "$state"/listener.log; do
    [[ -s "$f" ]] && { echo "----- $f"; tail -n 20 "$f"; } >&2
  done
  exit 1
}
pass() { echo "ok: $*"; }

alive() {
  local stat
  [[ -n "${1:-}" ]] && read -r stat <"/proc/$1/stat" 2>/dev/null || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

# Fails unless nothing named with id $1 is left: no namespace, no link.
assert_gone() {
  local id=$1 left
  left=$(ip netns list | grep "^nh-$id-" || true)
  [[ -z "$left" ]] || fail "namespaces left after down: $left"
  left=$(ip -o link show | grep ": nh$id" || true)
  [[ -z "$left" ]] || fail "links left after down: $left"
}

ssh_to() { timeout "$deadline_s" ssh -F "$state/ssh_config" "root@$1" "${@:2}"; }

# Connects to $2:$3 from namespace $1 and prints the first line the peer sends.
tcp_line() {
  # shellcheck disable=SC2016
  timeout 10 ip netns exec "$1" \
    bash -c 'exec 3<>"/dev/tcp/$0/$1" && read -r line <&3 && echo "$line"' "$2" "$3"
}

# --- up ---------------------------------------------------------------------------------------
start=$EPOCHREALTIME
out=$("$hosts_sh" up "$state" 3) || fail "up failed"
took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
mapfile -t addrs <<<"$out"
[[ ${#addrs[@]} -eq 3 ]] || fail "up printed '$out', not 3 addresses"
[[ "$out" == "$(cat "$state/hosts")" ]] || fail "up printed '$out', unlike STATE/hosts"
mapfile -t namespaces <"$state/netns"
[[ ${#namespaces[@]} -eq 3 ]] || fail "STATE/netns has ${#namespaces[@]} lines"
id=$(cat "$state/netns_hosts.id")
sshd_pids=$(cat "$state"/host*/sshd.pid)
pass "up of 3 hosts in ${took}s: ${addrs[*]} (${namespaces[*]})"

# --- ssh --------------------------------------------------------------------------------------
name=$(ssh_to "${addrs[0]}" hostname) || fail "ssh to host 1 failed"
[[ "$name" == "${namespaces[0]}" ]] || fail "hostname over ssh to host 1 printed '$name'"
pass "ssh root@${addrs[0]} hostname: $name"

name=$(timeout "$deadline_s" ip netns exec "${namespaces[0]}" \
  ssh -F "$state/ssh_config" "root@${addrs[1]}" hostname) || fail "ssh from host 1 to host 2 failed"
[[ "$name" == "${namespaces[1]}" ]] || fail "hostname over ssh from host 1 to 2 printed '$name'"
pass "from host 1, ssh root@${addrs[1]} hostname: $name"

# --- namespaces -------------------------------------------------------------------------------
for i in 0 1 2; do
  ns=${namespaces[i]}
  out=$(ip netns exec "$ns" ip -o addr show)
  if grep -Eq ' inet6? (127\.|::1/)' <<<"$out"; then fail "$ns has a loopback address: $out"; fi
  err=$(ip netns exec "$ns" bash -c 'exec 3<>/dev/tcp/127.0.0.1/22' 2>&1) &&
    fail "in $ns a connection to 127.0.0.1:22 succeeded"
  [[ "$err" == *"Network is unreachable"* ]] || fail "in $ns 127.0.0.1 failed with '$err'"
done
pass "no host has 127.0.0.1 or ::1; connecting to 127.0.0.1 fails: Network is unreachable"

out=$(ssh_to "${addrs[2]}" 'ip -4 -o addr show; readlink /proc/self/ns/net') ||
  fail "ssh to host 3 failed"
v4=$(grep -o ' inet [0-9.]*' <<<"$out" | awk '{print $2}' | paste -sd' ')
[[ "$v4" == "${addrs[2]}" ]] || fail "over ssh, host 3's ip addr shows '$v4', not ${addrs[2]} alone"
netns=$(tail -n 1 <<<"$out")
want=$(ip netns exec "${namespaces[2]}" readlink /proc/self/ns/net)
[[ "$netns" == "$want" ]] || fail "over ssh to host 3 the network namespace is $netns, not $want"
pass "a command over ssh to host 3 runs in ${namespaces[2]} ($netns) and sees only ${addrs[2]}"

# --- a daemon started over ssh ----------------------------------------------------------------
cat >"$state/listener.pl" <<'EOF'
# Listens on 0.0.0.0 at a port the kernel picks, writes the port to $ARGV[0], and greets every
# connection with "hello from $ARGV[1]".
use strict;
use warnings;
use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalAddr => '0.0.0.0', LocalPort => 0, Listen => 16, Proto => 'tcp')
  or die "listen: $!";
open(my $f, '>', "$ARGV[0].tmp") or die "$ARGV[0].tmp: $!";
print $f $s->sockport, "\n";
close $f;
rename("$ARGV[0].tmp", $ARGV[0]) or die "rename: $!";
while (my $c = $s->accept) { print $c "hello from $ARGV[1]\n"; close $c; }
EOF
listener=$(ssh_to "${addrs[1]}" \
  "nohup perl $state/listener.pl $state/listener.port \"\$(hostname)\" \
    </dev/null >$state/listener.log 2>&1 & echo \$!") || fail "ssh to start the listener failed"
for ((i = 0; i < 10 * deadline_s; i++)); do
  [[ -s "$state/listener.port" ]] && break
  alive "$listener" || fail "the listener exited"
  sleep 0.1
done
[[ -s "$state/listener.port" ]] || fail "the listener wrote no port in ${deadline_s}s"
port=$(cat "$state/listener.port")
where=$(ip netns identify "$listener")
[[ "$where" == "${namespaces[1]}" ]] || fail "the listener (pid $listener) runs in '$where'"
pass "ssh started a listener on 0.0.0.0:$port in $where (pid $listener)"

line=$(tcp_line "${namespaces[0]}" "${addrs[1]}" "$port") ||
  fail "host 1 cannot reach ${addrs[1]}:$port"
[[ "$line" == "hello from ${namespaces[1]}" ]] || fail "${addrs[1]}:$port said '$line'"
pass "from host 1, ${addrs[1]}:$port says '$line'"
line=$(tcp_line "${namespaces[1]}" "${addrs[1]}" "$port") ||
  fail "host 2 cannot reach its own ${addrs[1]}:$port"
pass "from host 2, its own ${addrs[1]}:$port says '$line'"
if err=$(tcp_line "${namespaces[1]}" 127.0.0.1 "$port" 2>&1); then
  fail "in host 2, 127.0.0.1:$port answered '$err'"
fi
[[ "$err" == *"Network is unreachable"* ]] || fail "in host 2, 127.0.0.1:$port failed with '$err'"
pass "in host 2, 127.0.0.1:$port fails: Network is unreachable"

# --- a second up of the same directory --------------------------------------------------------
if err=$("$hosts_sh" up "$state" 3 2>&1); then
  fail "a second up of the same directory succeeded"
fi
[[ "$err" == *"already up"* ]] || fail "a second up said '$err'"
ssh_to "${addrs[0]}" true || fail "after a refused second up, ssh to host 1 fails"
pass "a second up of the same directory fails: $err"

# --- down -------------------------------------------------------------------------------------
"$hosts_sh" down "$state" || fail "down failed"
for pid in $sshd_pids $listener; do
  alive "$pid" && fail "process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline")) is left after down"
done
assert_gone "$id"
[[ ! -e "$state/hosts" ]] || fail "STATE/hosts is left after down"
"$hosts_sh" down "$state" || fail "a second down failed"
pass "down kills the sshds and the listener, removes namespaces, veths and bridge; twice is fine"

# --- an up that fails -------------------------------------------------------------------------
if err=$(NETNS_HOSTS_SSHD=/bin/false "$hosts_sh" up "$state" 3 2>&1); then
  fail "up with a failing sshd succeeded"
fi
[[ "$err" == *"up failed: sshd of nh-"*"did not start"* ]] ||
  fail "up with a failing sshd said '$err'"
id=$(grep -o 'nh-[0-9a-f]\{5\}-h' <<<"$err" | head -n 1 | cut -d- -f2)
assert_gone "$id"
"$hosts_sh" down "$state" || fail "down after a failed up failed"
pass "an up whose sshd fails exits non-zero, says '$(head -n 1 <<<"$err")', leaves nothing"

echo "PASS"
