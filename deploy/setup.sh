#!/usr/bin/env bash
# Installs every Debian package that building, testing and running the parameter server need.
# Idempotent and quiet when everything is already there; safe to run before every command.
#
#   ./deploy/setup.sh           what the build, the tests and the daemons need
#   ./deploy/setup.sh --torch   that and Debian's PyTorch (python3-torch 1.13, CPU), which only the
#                               comparisons with PyTorch in tests/bench/ use (model_vs_torch.sh,
#                               family_auc.sh); ./deploy/test.sh never asks for it
set -euo pipefail

torch=0
for arg in "$@"; do
  case "$arg" in
    --torch) torch=1 ;;
    *) echo "usage: $0 [--torch]" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  bazel-bootstrap          # Bazel 4.2.3, works offline
  g++
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev
  librocksdb-dev
  catch2                   # Catch2 v2: catch2/catch.hpp
  libgloo-dev              # CPU AllReduce (TCP)
  libcpp-httplib-dev       # metrics endpoint
  libxxhash-dev            # key-to-shard hash (XXH3)
  zlib1g-dev               # gzip input files
  libopenblas-dev          # CPU GEMMs of the worker
  openmpi-bin libopenmpi-dev  # reference AllReduce in the benchmark
  slurmctld slurmd slurm-client munge  # real Slurm cluster of tests/cluster/slurm_cluster.sh
  openssh-server openssh-client iproute2  # ssh hosts of tests/cluster/netns_hosts.sh
  python3 python3-yaml     # offline checks of the Kubernetes manifests (deploy/k8s)
  python3-grpcio python3-xxhash python3-protobuf python3-numpy  # the Python client (client/python)
  prometheus               # tests/metrics: a real Prometheus scrapes a cluster; promtool checks /metrics
  python3-matplotlib       # the training report's plots (deploy/report)
  etcd-server etcd-client  # coordinators' state and leader election (server/coordinator, --etcd)
  openssl                  # certificates of common/grpc:tls_options_test
  clang-14 libclang-rt-14-dev lld  # libFuzzer targets with ASan and UBSan (tests/fuzz, --config=fuzz)
)
if ((torch)); then
  PACKAGES+=(python3-torch python3-numpy)  # tests/bench/torch_*.py
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
