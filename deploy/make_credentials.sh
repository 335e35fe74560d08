#!/usr/bin/env bash
# Makes what a cluster needs for mutual TLS and bearer tokens (deploy/README.md: Security),
# with openssl.
#
#   deploy/make_credentials.sh OUT_DIR [NAME...]
#
# NAME: every host name or IP address the daemons are dialled at (their advertised hosts);
# default: localhost, 127.0.0.1 and this machine's name. Writes into OUT_DIR (created, mode 700):
#
#   ca.pem  ca.key          the cluster's CA (give ca.pem to everyone; keep ca.key offline)
#   node.pem  node.key      the daemons' certificate, valid for every NAME, as server and client:
#                           ps_coordinator and ps_server --tls_cert/--tls_key
#   client.pem  client.key  a client certificate for workers, clients and ps_ctl
#   tokens                  an admin and a worker token: --token_file of the daemons and ps_ctl
#   worker_token            the worker token alone: --token_file of workers and clients
#
# Every file is readable by its owner only. Environment: DAYS (default 365), the certificates'
# validity. An existing OUT_DIR/ca.pem is refused: make a new folder for new credentials.
set -euo pipefail

if (($# < 1)) || [[ "$1" == -* ]]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
shift
names=("$@")
if ((${#names[@]} == 0)); then
  names=(localhost 127.0.0.1 "$(hostname)")
fi
days=${DAYS:-365}
if ! [[ "$days" =~ ^[1-9][0-9]*$ ]]; then
  echo "make_credentials: DAYS must be a positive number of days, got \"$days\"" >&2
  exit 2
fi
if [[ -e "$out/ca.pem" ]]; then
  echo "make_credentials: $out/ca.pem exists; give a new folder" >&2
  exit 1
fi
umask 077
mkdir -p "$out"
chmod 700 "$out"

san=""
for name in "${names[@]}"; do
  if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then
    san+="${san:+,}IP:$name"
  else
    san+="${san:+,}DNS:$name"
  fi
done

# ECDSA P-256 keys: small, and quick to handshake with.
key_options=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${key_options[@]}" -days "$days" -subj "/CN=parameter-server CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$out/ca.key" -out "$out/ca.pem" 2>/dev/null

issue() {  # issue NAME SUBJECT SAN
  local name=$1 subject=$2 alt=$3
  openssl req -new "${key_options[@]}" -subj "/CN=$subject" \
    -keyout "$out/$name.key" -out "$out/$name.csr" 2>/dev/null
  local extensions
  extensions=$(mktemp)
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    echo "subjectAltName=$alt"
  } >"$extensions"
  openssl x509 -req -days "$days" -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -extfile "$extensions" -out "$out/$name.pem" 2>/dev/null
  rm -f "$extensions" "$out/$name.csr"
}
issue node "parameter-server node" "$san"
issue client "parameter-server client" "DNS:client"
rm -f "$out/ca.srl"

admin=$(openssl rand -hex 32)
worker=$(openssl rand -hex 32)
printf '# role token (deploy/README.md: Security)\nadmin %s\nworker %s\n' "$admin" "$worker" >"$out/tokens"
printf '# role token (deploy/README.md: Security)\nworker %s\n' "$worker" >"$out/worker_token"

echo "make_credentials: wrote $out/{ca.pem,ca.key,node.pem,node.key,client.pem,client.key,tokens,worker_token}"
echo "make_credentials: node.pem is valid for ${names[*]} until $(openssl x509 -in "$out/node.pem" -noout -enddate | cut -d= -f2)"
