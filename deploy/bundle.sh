#!/usr/bin/env bash
# Packs built binaries and the shared libraries they need into one folder (and a tarball beside
# it), so that they run on a machine that has none of our build dependencies: Debian's gRPC,
# Protocol Buffers, Abseil, RocksDB, OpenBLAS, Gloo... travel with them. What does not travel:
#   - the C library family (libc, libm, libpthread, libdl, librt, ld-linux): every Linux has one,
#     and a copy would have to replace the target's own loader;
#   - the NVIDIA driver's libraries (libcuda, libnvidia-*): they must match the target's kernel
#     driver;
#   - with --without_cuda_libs, the CUDA toolkit's (cudart, cuBLAS, NCCL...), for a machine that
#     has CUDA installed (cuBLAS alone is over 500 MB).
#
#   deploy/bundle.sh [-o DIR] [--bin_dir=DIR] [--no_build] [--without_cuda_libs] [BINARY...]
#
# BINARY is a path in the workspace ("server/ps_server"); the default is the daemons, the tools,
# the benchmarks and every test binary, GPU tests included. Without --no_build they are built with
# `bazel build -c opt` and taken from bazel-out/k8-opt/bin. The bundle mirrors the workspace:
# DIR/bin/<package>/<name> (tests start daemons by such relative paths), DIR/bin/deploy/jobs, and
# DIR/lib. Run a binary with DIR/run.sh, from DIR/bin:
#
#   out/bundle/run.sh cuda_kernels/kernels_gpu_test
#   out/bundle/run.sh server/ps_server --coordinator=HOST:PORT
set -euo pipefail
cd "$(dirname "$0")/.."

out=out/bundle
bin_dir=""
build=1
cuda_libs=1
binaries=()
for arg in "$@"; do
  case "$arg" in
    -o) echo "use -o=DIR" >&2; exit 2 ;;
    -o=*) out="${arg#-o=}" ;;
    --bin_dir=*) bin_dir="${arg#--bin_dir=}" ;;
    --no_build) build=0 ;;
    --without_cuda_libs) cuda_libs=0 ;;
    -*) echo "bundle.sh: unknown option $arg" >&2; exit 2 ;;
    *) binaries+=("$arg") ;;
  esac
done

if ((${#binaries[@]} == 0)); then
  binaries=(
    server/ps_server server/coordinator/ps_coordinator worker/ps_worker client/ps_ctl
    worker/tools/ps_datagen worker/model/dlrm_step_bench tests/bench/ps_bench
  )
  if ((build)); then
    # Every test, the GPU ones (tagged manual) included.
    while read -r label; do
      binaries+=("$(echo "${label#//}" | tr ':' '/')")
    done < <(bazel query 'tests(//...) union attr(tags, "[\[ ]gpu[,\]]", tests(//...))' 2>/dev/null)
  fi
fi

if ((build)); then
  targets=()
  for b in "${binaries[@]}"; do targets+=("//$(dirname "$b"):$(basename "$b")"); done
  bazel build -c opt "${targets[@]}" >&2
  bin_dir=bazel-out/k8-opt/bin
fi
if [[ -z "$bin_dir" ]]; then
  echo "bundle.sh: --no_build needs --bin_dir" >&2
  exit 2
fi

# Libraries that must come from the target machine itself.
is_system_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|\
libresolv.so*|libutil.so*|libcuda.so*|libnvidia-*) return 0 ;;
  esac
  if ((!cuda_libs)); then
    case "$1" in
      libcudart.so*|libcublas*|libcurand.so*|libcusparse.so*|libnccl.so*|libnvrtc*|\
libnvJitLink*) return 0 ;;
    esac
  fi
  return 1
}

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "${binaries[@]}"; do
  src="$bin_dir/$b"
  if [[ ! -x "$src" ]]; then
    echo "bundle.sh: $src is not a built binary" >&2
    exit 1
  fi
  mkdir -p "$out/bin/$(dirname "$b")"
  cp -L "$src" "$out/bin/$b"
  # `name => /path (address)`; a missing library is an error here, not on the target.
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    if [[ "$path" == "not" ]]; then
      echo "bundle.sh: $b needs $name, which is not found on this machine" >&2
      exit 1
    fi
    is_system_lib "$name" && continue
    [[ -e "$out/lib/$name" ]] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$src")
done
mkdir -p "$out/bin/deploy"
cp -r deploy/jobs "$out/bin/deploy/"

cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs a bundled binary (a path under bin/, e.g. server/ps_server) with the bundled libraries,
# from bin/, where tests find the daemons they start.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
binary="$1"
shift
cd "$here/bin"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "./$binary" "$@"
EOF
chmod +x "$out/run.sh"
tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
echo "bundle: $out ($(du -sh "$out" | cut -f1)), $out.tar.gz; run with $out/run.sh BINARY"
