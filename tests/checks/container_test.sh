#!/usr/bin/env bash
# dsfs as a container runs it (docs/containers.md): the mount is made inside a new mount and PID
# namespace (unshare(1), as docker and Kubernetes make them), read from there, invisible
# outside, and gone with the namespace: its last process ends, the kernel kills the rest (the
# daemon), and neither the mount nor the daemon is left. Then the same with -o kernel, unmounted
# by dsfs umount from inside, where the host must see nothing of EROFS or the private mount.
# Usage: container_test.sh DSFS_BINARY
set -euo pipefail
dsfs=$1
[[ $(id -u) == 0 ]] || { echo "SKIPPED: unshare needs root"; exit 77; }
[[ -c /dev/fuse ]] || { echo "SKIPPED: no /dev/fuse"; exit 77; }
command -v unshare >/dev/null || { echo "SKIPPED: unshare (util-linux) is not installed"; exit 77; }
tmp=$(mktemp -d)
fail=0
cleanup() {
  # Only what this test made: a mount left at its mountpoint (a failure), its directory.
  if mountpoint -q "$tmp/mnt" 2>/dev/null; then umount -l "$tmp/mnt" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
check() {  # check WHAT COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
mkdir -p "$tmp/src/class_a" "$tmp/mnt"
for i in 1 2 3; do echo "image $i" >"$tmp/src/class_a/$i.txt"; done
"$dsfs" pack -q "$tmp/src" "$tmp/s.dsfs"
daemons() { pgrep -f -- "mount $tmp/s.dsfs" || true; }

# Inside: mount, read, say what the namespace sees, then end without unmounting.
inside=$(unshare --mount --pid --fork --propagation private -- sh -c '
  "$1" mount "$2" "$3" || exit 1
  cat "$3/class_a/2.txt"
  grep -c " $3 " /proc/self/mounts
  ps -e -o comm= | grep -c "^dsfs$"
' sh "$dsfs" "$tmp/s.dsfs" "$tmp/mnt" 2>&1) || true
check "read inside the namespace" grep -qx "image 2" <<<"$inside"
check "mounted there ($(sed -n 2p <<<"$inside") mount)" test "$(sed -n 2p <<<"$inside")" = 1
check "its daemon ran there" test "$(sed -n 3p <<<"$inside")" -ge 1
check "no mount outside" sh -c "! grep -q ' $tmp/mnt ' /proc/self/mounts"
for _ in $(seq 50); do [[ -z $(daemons) ]] && break; sleep 0.1; done
check "the daemon ended with the namespace" test -z "$(daemons)"
check "the mountpoint is an empty directory again" test -z "$(ls -A "$tmp/mnt")"

# -o kernel (root in the host's user namespace: loop devices and EROFS), unmounted from inside.
if grep -qw erofs /proc/filesystems; then
  inside=$(unshare --mount --pid --fork --propagation private -- sh -c '
    "$1" mount "$2" "$3" -o kernel || exit 1
    cat "$3/class_a/3.txt"
    findmnt -n -o FSTYPE "$3"
    "$1" umount "$3" && echo unmounted
  ' sh "$dsfs" "$tmp/s.dsfs" "$tmp/mnt" 2>&1) || true
  check "-o kernel: read inside" grep -qx "image 3" <<<"$inside"
  check "-o kernel: EROFS there" grep -qx erofs <<<"$inside"
  check "-o kernel: dsfs umount inside" grep -qx unmounted <<<"$inside"
  check "-o kernel: nothing of it outside" \
    sh -c "! grep -qE ' $tmp/mnt |dsfs-image:$tmp/s.dsfs ' /proc/self/mounts"
  # Its private directory (/run/dsfs/<dev>-<ino>-<pid>, of the mountpoint) is gone too.
  prefix="$(stat -c %D "$tmp/mnt")-$(stat -c %i "$tmp/mnt")-"
  check "-o kernel: no private directory left" \
    sh -c "! ls /run/dsfs 2>/dev/null | grep -q '^$prefix'"
  for _ in $(seq 50); do [[ -z $(daemons) ]] && break; sleep 0.1; done
  check "-o kernel: no daemon left" test -z "$(daemons)"
else
  echo "skipped: -o kernel (no EROFS in this kernel)"
fi
[[ $fail == 0 ]] || echo "inside said: $inside"
exit $fail
