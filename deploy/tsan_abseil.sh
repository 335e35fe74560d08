#!/usr/bin/env bash
# Builds Debian's own Abseil (the source package of the installed libabsl-dev, Debian's patches
# applied) with -fsanitize=thread, as shared libraries with Debian's sonames, into
# /opt/ps-tsan/abseil. `bazel test --config=tsan` runs every test with that folder first on
# LD_LIBRARY_PATH, so our code, gRPC and protobuf all lock through an instrumented absl::Mutex and
# ThreadSanitizer sees every lock and unlock (Debian's libabsl is not instrumented, and with it TSan
# reports every access guarded by an absl::Mutex as a race).
#
#   deploy/tsan_abseil.sh       once per machine, before `bazel test --config=tsan ...`
#
# Idempotent: does nothing when the libraries of the installed version are there. The source comes
# from Debian's archive through apt (signatures checked), with a private sources list, so the
# machine's apt configuration is left as it was. Takes about 10 minutes on two cores.
set -euo pipefail

PREFIX=/opt/ps-tsan/abseil
version=$(dpkg-query -W -f='${Version}' libabsl-dev)
if [[ -f "$PREFIX/VERSION" && "$(cat "$PREFIX/VERSION")" == "$version" ]]; then
  exit 0
fi

"$(dirname "$0")/setup.sh"
if ! dpkg-query -W -f='${Status}\n' dpkg-dev cmake ninja-build 2>/dev/null |
    grep -c "install ok installed" | grep -q 3; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q dpkg-dev cmake ninja-build >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tsan_abseil.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A private apt state that knows the source indexes of the archives the machine installs from.
mkdir -p "$work/apt/parts" "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/src"
for f in /etc/apt/sources.list.d/*.sources; do
  sed -E 's/^Types:.*/Types: deb-src/' "$f" >"$work/apt/parts/$(basename "$f")"
done
if ! compgen -G "$work/apt/parts/*.sources" >/dev/null; then
  echo "tsan_abseil: no deb822 apt sources in /etc/apt/sources.list.d to take the archive from" >&2
  exit 1
fi
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/apt/parts"
          -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")
apt-get "${apt_opts[@]}" -q update >/dev/null
(cd "$work/src" && apt-get "${apt_opts[@]}" -q source "abseil=$version" >/dev/null)
srcdir=$(find "$work/src" -maxdepth 1 -mindepth 1 -type d -name 'abseil-*' | head -1)
[[ -n "$srcdir" ]] || { echo "tsan_abseil: the source package did not unpack" >&2; exit 1; }

# The options Debian builds with (debian/rules): C++17, shared, its patched options.h and soname.
cmake -S "$srcdir" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_STANDARD=17 -DABSL_PROPAGATE_CXX_STD=ON \
  -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
  -DCMAKE_C_FLAGS="-fsanitize=thread" -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_INSTALL_PREFIX="$work/install" >/dev/null
ninja -C "$work/build" -j "$(nproc)" >/dev/null
ninja -C "$work/build" install >/dev/null

rm -rf "$PREFIX"
mkdir -p "$PREFIX/lib"
cp -a "$work/install"/lib*/libabsl_*.so* "$PREFIX/lib/"
# Every soname Debian's libraries ask for must be there, or the loader would mix in uninstrumented
# ones.
missing=0
for lib in /usr/lib/x86_64-linux-gnu/libabsl_*.so.*.*; do
  soname=$(objdump -p "$lib" | awk '/SONAME/ { print $2 }')
  [[ -e "$PREFIX/lib/$soname" ]] || { echo "tsan_abseil: $soname was not built" >&2; missing=1; }
done
((missing == 0)) || exit 1
echo "$version" >"$PREFIX/VERSION"
echo "tsan_abseil: instrumented Abseil $version in $PREFIX/lib"
