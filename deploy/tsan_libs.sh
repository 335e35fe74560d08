#!/usr/bin/env bash
# Builds Debian's own Abseil, protobuf and gRPC (the source packages of the installed -dev
# packages, Debian's patches applied) with -fsanitize=thread, as shared libraries under the sonames
# Debian's own carry, into /opt/ps-tsan/<library>/lib. `bazel test --config=tsan` links every test
# and daemon with an RPATH to those folders, so our code, gRPC, protobuf and Abseil are all
# instrumented and ThreadSanitizer sees every lock, atomic and hand-over between threads. With
# Debian's uninstrumented libraries it cannot: it never sees an absl::Mutex lock, nor gRPC passing
# a call's memory between its threads through its own atomics and completion queues, and reports
# each such access as a race.
#
#   deploy/tsan_libs.sh       once per machine, before `bazel test --config=tsan ...`
#
# Idempotent: a library whose folder holds the installed version's build is not built again. The
# sources come from Debian's archive through apt (signatures checked), with a private sources
# list, so the machine's apt configuration is left as it was. Takes about an hour on two cores,
# most of it gRPC.
set -euo pipefail

ROOT=/opt/ps-tsan
# Debug information only where reports need lines (Abseil, protobuf); gRPC's frames are named by
# their symbols, which halves the longest build.
TSAN_FLAGS="-fsanitize=thread -g"
TSAN_FLAGS_NO_DEBUG="-fsanitize=thread"

# The installed version of a binary package, without a binNMU suffix (+bN), which names a rebuild
# of the same source.
installed_source_version() {
  dpkg-query -W -f='${Version}' "$1" | sed -E 's/\+b[0-9]+$//'
}

# What a folder's VERSION file holds besides the source version: how this script builds, so that a
# change of it rebuilds what an older one built (2: no RPATH in the libraries, whose loader
# must follow the test binaries' RPATH).
BUILD_FORMAT=2

# True when $ROOT/$1 already holds a build of source version $2 by this script's format.
is_built() {
  [[ -f "$ROOT/$1/VERSION" && "$(cat "$ROOT/$1/VERSION")" == "$2 format $BUILD_FORMAT" ]]
}

want_abseil=$(installed_source_version libabsl-dev)
want_protobuf=$(installed_source_version libprotobuf-dev)
want_grpc=$(installed_source_version libgrpc++-dev)
if is_built abseil "$want_abseil" && is_built protobuf "$want_protobuf" &&
   is_built grpc "$want_grpc"; then
  exit 0
fi

"$(dirname "$0")/setup.sh"
# The build tools, and libprotoc-dev, which gRPC's CMake files ask for even when its code
# generators are not built.
build_deps=(dpkg-dev cmake ninja-build libprotoc-dev)
if ! dpkg-query -W -f='${Status}\n' "${build_deps[@]}" 2>/dev/null |
    grep -c "install ok installed" | grep -q "${#build_deps[@]}"; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${build_deps[@]}" >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tsan_libs.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A private apt state that knows the source indexes of the archives the machine installs from.
mkdir -p "$work/apt/parts" "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
for f in /etc/apt/sources.list.d/*.sources; do
  sed -E 's/^Types:.*/Types: deb-src/' "$f" >"$work/apt/parts/$(basename "$f")"
done
if ! compgen -G "$work/apt/parts/*.sources" >/dev/null; then
  echo "tsan_libs: no deb822 apt sources in /etc/apt/sources.list.d to take the archive from" >&2
  exit 1
fi
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/apt/parts"
          -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")
apt-get "${apt_opts[@]}" -q update >/dev/null

# Unpacks source package $1 at version $2 under $work/src/$1 and prints the source folder.
fetch_source() {
  mkdir -p "$work/src/$1"
  (cd "$work/src/$1" && apt-get "${apt_opts[@]}" -q source "$1=$2" >/dev/null 2>&1)
  local dir
  dir=$(find "$work/src/$1" -maxdepth 1 -mindepth 1 -type d | head -1)
  [[ -n "$dir" ]] || { echo "tsan_libs: the source package $1 did not unpack" >&2; exit 1; }
  echo "$dir"
}

# Copies the built shared library $2 into $ROOT/$1/lib under every name in "${@:3}" (the sonames
# Debian's libraries have), so that the loader takes it wherever a Debian soname is asked for.
install_as() {
  local lib=$1 built=$2
  shift 2
  for name in "$@"; do
    cp -L "$built" "$ROOT/$lib/lib.new/$name"
  done
}

# Checks that every soname of the Debian libraries named by the globs "${@:3}" (under the system's
# library folder) has an instrumented stand-in in $ROOT/$1/lib.new, then puts the folder in place
# with its version stamp $2.
finish() {
  local lib=$1 version=$2 missing=0 soname
  shift 2
  local debian_libs=()
  for glob in "$@"; do
    mapfile -t -O "${#debian_libs[@]}" debian_libs < <(compgen -G "/usr/lib/x86_64-linux-gnu/$glob")
  done
  for debian_lib in "${debian_libs[@]}"; do
    soname=$(objdump -p "$debian_lib" | awk '/SONAME/ { print $2 }')
    [[ -e "$ROOT/$lib/lib.new/$soname" ]] ||
      { echo "tsan_libs: $soname was not built" >&2; missing=1; }
  done
  ((missing == 0)) || exit 1
  rm -rf "$ROOT/$lib/lib"
  mv "$ROOT/$lib/lib.new" "$ROOT/$lib/lib"
  echo "$version format $BUILD_FORMAT" >"$ROOT/$lib/VERSION"
  echo "tsan_libs: instrumented $lib $version in $ROOT/$lib/lib"
}

# Configures the CMake project in $1 into build folder $2, instrumented, with compile flags $3 and
# build type $4, and the project's own options "${@:5}". Shared libraries without an RPATH, so
# that the loader follows the test binaries' RPATH to the other instrumented libraries.
tsan_cmake() {
  local src=$1 build=$2 flags=$3 type=$4
  shift 4
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$type" -DCMAKE_CXX_STANDARD=17 \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SKIP_RPATH=ON "$@" >/dev/null
}

prepare() {
  rm -rf "$ROOT/$1"
  mkdir -p "$ROOT/$1/lib.new"
}

if ! is_built abseil "$want_abseil"; then
  prepare abseil
  src=$(fetch_source abseil "$want_abseil")
  # The options Debian builds with (debian/rules): C++17, shared, its patched options.h and soname.
  tsan_cmake "$src" "$work/abseil" "$TSAN_FLAGS" RelWithDebInfo \
    -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
    -DCMAKE_INSTALL_PREFIX="$work/abseil/install"
  ninja -C "$work/abseil" -j "$(nproc)" >/dev/null
  ninja -C "$work/abseil" install >/dev/null
  cp -a "$work/abseil/install"/lib*/libabsl_*.so* "$ROOT/abseil/lib.new/"
  finish abseil "$want_abseil" 'libabsl_*.so.*.*'
fi

if ! is_built protobuf "$want_protobuf"; then
  prepare protobuf
  src=$(fetch_source protobuf "$want_protobuf")
  # Only the two runtime libraries: protoc stays Debian's (generated code does not depend on how
  # protoc was built).
  tsan_cmake "$src" "$work/protobuf" "$TSAN_FLAGS" RelWithDebInfo \
    -Dprotobuf_BUILD_SHARED_LIBS=ON -Dprotobuf_BUILD_TESTS=OFF \
    -Dprotobuf_BUILD_PROTOC_BINARIES=OFF -Dprotobuf_WITH_ZLIB=ON
  ninja -C "$work/protobuf" -j "$(nproc)" libprotobuf libprotobuf-lite >/dev/null
  install_as protobuf "$work/protobuf/libprotobuf.so" libprotobuf.so.32
  install_as protobuf "$work/protobuf/libprotobuf-lite.so" libprotobuf-lite.so.32
  finish protobuf "$want_protobuf" 'libprotobuf*.so.*.*'
fi

if ! is_built grpc "$want_grpc"; then
  prepare grpc
  src=$(fetch_source grpc "$want_grpc")
  # Debian's options (debian/rules): every dependency from the system's packages. Only the
  # libraries our programs load are built; they keep gRPC's sonames, which are Debian's.
  tsan_cmake "$src" "$work/grpc" "$TSAN_FLAGS_NO_DEBUG" Release \
    -DBUILD_SHARED_LIBS=ON -DgRPC_BUILD_TESTS=OFF \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package \
    -DgRPC_PROTOBUF_PROVIDER=package -DgRPC_RE2_PROVIDER=package \
    -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
    -DgRPC_BENCHMARK_PROVIDER=none -DgRPC_BACKWARDS_COMPATIBILITY_MODE=OFF \
    -DgRPC_BUILD_CODEGEN=OFF -DgRPC_BUILD_CSHARP_EXT=OFF
  ninja -C "$work/grpc" -j "$(nproc)" grpc++ grpc gpr upb address_sorting >/dev/null
  for lib in "$work/grpc"/lib{grpc++,grpc,gpr,upb,address_sorting}.so; do
    soname=$(objdump -p "$lib" | awk '/SONAME/ { print $2 }')
    install_as grpc "$lib" "$soname"
  done
  finish grpc "$want_grpc" 'libgrpc++.so.*.*' 'libgrpc.so.*.*' 'libgpr.so.*.*' 'libupb.so.*.*' \
    'libaddress_sorting.so.*.*'
fi
