#!/usr/bin/env bash
# deploy/bundle.sh on two built binaries: every library they need, other than the C library's and
# the NVIDIA driver's, must resolve inside the bundle when only the bundle is on the library path,
# and a bundled binary must run through run.sh.
set -euo pipefail

out="${TEST_TMPDIR:-$(mktemp -d)}/bundle"
binaries=(server/coordinator/ps_coordinator cuda_kernels/device_test)
deploy/bundle.sh -o="$out" --no_build --bin_dir="$PWD" "${binaries[@]}"

fail=0
for b in "${binaries[@]}"; do
  [[ -x "$out/bin/$b" ]] || { echo "FAIL: $b is not in the bundle"; fail=1; continue; }
  deps=$(env -i LD_LIBRARY_PATH="$out/lib" /usr/bin/ldd "$out/bin/$b")
  if grep -q "not found" <<<"$deps"; then
    echo "FAIL: $b has libraries the bundle lacks:"; grep "not found" <<<"$deps"; fail=1
  fi
  # Resolved outside the bundle: only the C library family may be.
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    case "$path" in
      "$out"/lib/*) ;;
      *)
        case "$name" in
          libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*) ;;
          *) echo "FAIL: $b takes $name from $path, outside the bundle"; fail=1 ;;
        esac
        ;;
    esac
  done <<<"$deps"
  grep -q "libgrpc\|libcudart" <<<"$deps" || { echo "FAIL: $b: no bundled library resolved"; fail=1; }
done
[[ -f "$out.tar.gz" ]] || { echo "FAIL: no tarball"; fail=1; }
[[ -f "$out/bin/deploy/jobs/quickstart.pbtxt" ]] || { echo "FAIL: no job files"; fail=1; }

# The bundled device test runs (it takes the CPU path here) with the bundle's libraries only.
if ! output=$(env -i PATH=/usr/bin:/bin "$out/run.sh" cuda_kernels/device_test 2>&1); then
  echo "FAIL: the bundled device_test did not run:"; echo "$output"; fail=1
fi
exit $fail
