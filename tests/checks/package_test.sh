#!/usr/bin/env bash
# The Debian package (packaging/package.cmake) as an operator gets it: `cpack -G DEB` in the
# build directory makes dsfs_VERSION_ARCH.deb, whose Depends name runtime libraries only (from
# dpkg-shlibdeps; none of what building or testing needs), which holds the binary, the mount
# helper, the systemd units, the man pages, bash completion, the example config, NEWS.md and
# the licence, and whose binary, unpacked into a scratch root, runs and shows the one version.
# Usage: package_test.sh BUILD_DIR DSFS_BINARY
set -euo pipefail
build=$1
dsfs=$2
for t in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$t" >/dev/null || { echo "SKIPPED: $t is not installed (scripts/setup.sh)"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check WHAT COMMAND...: the command succeeds
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
version=$("$dsfs" --version | sed -n 's/^dsfs //p')
[[ -n $version ]] || { echo "FAILED: no version from $dsfs --version"; exit 1; }
(cd "$build" && cpack -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1) ||
  { echo "FAILED: cpack -G DEB"; cat "$tmp/cpack.log"; exit 1; }
arch=$(dpkg --print-architecture)
deb="$tmp/out/dsfs_${version}_${arch}.deb"
[[ -f $deb ]] || { echo "FAILED: no $deb; made: $(ls "$tmp/out")"; exit 1; }
echo "ok: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"

field() { dpkg-deb -f "$deb" "$1"; }
check "Package: dsfs" test "$(field Package)" = dsfs
check "Version: $version" test "$(field Version)" = "$version"
depends=$(field Depends)
echo "Depends: $depends"
for want in 'libfuse3-3' 'liblmdb0' 'librocksdb' 'libzstd1' 'libcurl' 'libarchive13' 'fuse3'; do
  check "Depends names $want" grep -q "$want" <<<"$depends"
done
# Nothing that only building, testing or benchmarking needs.
for bad in ceph radosgw clang llvm torch python numpy gtest gmock googletest pandoc -dev \
           squashfs erofs-utils build-essential cmake ninja; do
  if grep -qi -- "$bad" <<<"$depends"; then echo "FAILED: Depends names $bad"; fail=1; fi
done

root="$tmp/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/dsfs sbin/mount.fuse.dsfs usr/lib/systemd/system/dsfs@.service \
         usr/lib/systemd/system/dsfs-s3@.service usr/share/man/man1/dsfs.1.gz \
         usr/share/man/man8/mount.fuse.dsfs.8.gz usr/share/bash-completion/completions/dsfs \
         usr/share/doc/dsfs/copyright usr/share/doc/dsfs/NEWS.md \
         usr/share/doc/dsfs/dsfs.conf.example; do
  check "holds /$f" test -e "$root/$f" -o -L "$root/$f"
done
check "the helper is a link to /usr/bin/dsfs" test "$(readlink "$root/sbin/mount.fuse.dsfs")" = /usr/bin/dsfs
check "the unit runs /usr/bin/dsfs" grep -q '^ExecStart=/usr/bin/dsfs mount' \
  "$root/usr/lib/systemd/system/dsfs@.service"
check "the licence is Apache-2.0, Debian's text" grep -q /usr/share/common-licenses/Apache-2.0 \
  "$root/usr/share/doc/dsfs/copyright"
check "the man pages are gzip, and man reads them" sh -c \
  "gzip -t '$root/usr/share/man/man1/dsfs.1.gz' && zcat '$root/usr/share/man/man1/dsfs.1.gz' | grep -q '^\\.TH'"
check "NEWS.md names $version" grep -q "$version" "$root/usr/share/doc/dsfs/NEWS.md"
check "nothing of the build directory" test -z "$(dpkg-deb -c "$deb" | grep -E 'tests/|CMakeFiles|\.o$|\.a$')"
check "the binary is stripped" sh -c "! file -L '$root/usr/bin/dsfs' | grep -q 'not stripped'"
out=$("$root/usr/bin/dsfs" --version)
check "the installed dsfs --version: $out" test "$out" = "dsfs $version"
out=$("$root/usr/bin/dsfs" -V)
check "the installed dsfs -V" test "$out" = "dsfs $version"

# The Python module's package, when the build made the module (DSFS_PYTHON).
if ! ls "$build"/python/dsfs/_dsfs*.so >/dev/null 2>&1; then
  echo "ok: no Python module in this build (DSFS_PYTHON off): no python3-dsfs package"
  exit $fail
fi
check "the dsfs package holds no Python module" \
  test -z "$(dpkg-deb -c "$deb" | grep -E 'dist-packages|_dsfs[^/]*\.so')"
pydeb="$tmp/out/python3-dsfs_${version}_${arch}.deb"
[[ -f $pydeb ]] || { echo "FAILED: no $pydeb; made: $(ls "$tmp/out")"; exit 1; }
echo "ok: $(basename "$pydeb"), $(du -k "$pydeb" | cut -f1) KiB"
check "Package: python3-dsfs" test "$(dpkg-deb -f "$pydeb" Package)" = python3-dsfs
pydepends=$(dpkg-deb -f "$pydeb" Depends)
echo "python3-dsfs Depends: $pydepends"
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
for want in "python3 (>= $pyver)" 'python3-numpy' 'liblmdb0' 'librocksdb' 'libzstd1' 'libcurl'; do
  check "python3-dsfs Depends names $want" grep -qF "$want" <<<"$pydepends"
done
for bad in libfuse fuse3 ceph -dev gtest pandoc; do
  if grep -qi -- "$bad" <<<"$pydepends"; then echo "FAILED: python3-dsfs Depends names $bad"; fail=1; fi
done
pyroot="$tmp/pyroot"
dpkg-deb -x "$pydeb" "$pyroot"
site="$pyroot/usr/lib/python3/dist-packages"
check "python3-dsfs holds dsfs/__init__.py, dsfs/torch.py" test -f "$site/dsfs/__init__.py" -a -f "$site/dsfs/torch.py"
so=$(ls "$site"/dsfs/_dsfs*.so 2>/dev/null | head -1)
check "python3-dsfs holds the extension ($(basename "${so:-none}"))" test -n "$so"
check "the extension links no libfuse" sh -c "! readelf -d '$so' | grep -qi fuse"
check "the extension is stripped" sh -c "! file -L '$so' | grep -q 'not stripped'"
out=$(cd "$tmp" && PYTHONPATH="$site" /usr/bin/python3 -c \
  'import dsfs, dsfs.torch; print(dsfs.__file__)' 2>&1) || true
check "/usr/bin/python3 imports dsfs from the package ($out)" test "$out" = "$site/dsfs/__init__.py"
exit $fail
