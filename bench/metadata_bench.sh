#!/usr/bin/env bash
# bench/metadata_bench.sh: the metadata of large stores, old format against new (issue 17:
# tables in compressed segments read lazily, format version 3, against raw tables, version 2).
#
#   bench/metadata_bench.sh [--files N] [--paths K] [--label TEXT] STORE...
#   bench/metadata_bench.sh --render RESULTS.jsonl [--label TEXT]   (rewrites RESULTS.md)
#
# For each STORE (e.g. the same `dsfs-gentar --files 1000000` tree packed as v2 and as v3),
# each step after drop_caches:
#   1. `dsfs mount` (FUSE) until it returns, then `ls` of the root; the daemon's RSS.
#   2. lstat of K random paths of the gentar set of N files (default 1,000,000; K default
#      100,000; dsfs-readbench --stat, one
#      thread, pass 1 cold and pass 2 hot), on that mount; RSS after.
#   3. `dsfs mount -o kernel`: its EROFS layout time (the log line "laid out in") and the
#      mount's total; RSS after.
# Writes bench/results/metadata/metadata-<date>.md and .jsonl. Environment: DSFS (default
# build/dsfs), BENCH_WORK (default /var/tmp/dsfs-bench), GENTAR (default build/bench/dsfs-gentar).
set -uo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${BENCH_WORK:-/var/tmp/dsfs-bench}
DSFS=${DSFS:-$REPO/build/dsfs}
GENTAR=${GENTAR:-$REPO/build/bench/dsfs-gentar}
PATHS=100000
FILES=1000000
LABEL=
RENDER=
STORES=()
while (($#)); do
  case $1 in
    --paths) PATHS=$2; shift ;;
    --files) FILES=$2; shift ;;
    --label) LABEL=$2; shift ;;
    --render) RENDER=$2; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) STORES+=("$1") ;;
  esac
  shift
done
render() {
  "${PY:-/usr/bin/python3}" - "$JSONL" "$LABEL" "$PATHS" >"$MD" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
label, paths = sys.argv[2], sys.argv[3]
by = {}
for r in rows:
    by.setdefault(r["ds"], {})[r["sys"] + "/" + r["metric"]] = r["data"]
print(f"# Metadata of large stores, {label or 'old format against new'}\n")
print("Each step after drop_caches, on this host. FUSE: `dsfs mount` until it returns plus `ls` "
      f"of the root; lstat of {paths} random paths (dsfs-readbench --stat, 1 thread: pass 1 cold, "
      "pass 2 hot). `-o kernel`: the EROFS layout (every inode read) and the whole mount.\n")
print("| store | format | store bytes | metadata as stored | mount + ls s | RSS after mount MB | "
      "lstat/s cold | lstat/s hot | RSS after lstat MB | -o kernel layout s | -o kernel mount s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for s, d in by.items():
    info = d.get("_/info", {}) or {}
    st = d.get("fuse/stat") or []
    rate = lambda i: f"{st[i]['files_per_s']:.0f}" if len(st) > i and "files_per_s" in st[i] else "-"
    mb = lambda k: f"{d[k]['rss_kb'] / 1024:.1f}" if isinstance(d.get(k), dict) else "-"
    print(f"| {s} | v{info.get('format_version')} | {d.get('_/store_bytes', 0):,} | "
          f"{info.get('metadata_bytes', 0):,} ({info.get('metadata_raw_bytes', 0):,} raw) | "
          f"{d.get('fuse/mount_ls_s')} | {mb('fuse/rss_after_mount')} | {rate(0)} | {rate(1)} | "
          f"{mb('fuse/rss_after_stat')} | {d.get('kernel/layout_s')} | {d.get('kernel/mount_s')} |")
PYEOF
}
if [[ -n $RENDER ]]; then
  JSONL=$RENDER MD=${RENDER%.jsonl}.md
  render
  exit 0
fi
((${#STORES[@]})) || { echo "metadata_bench: no store given" >&2; exit 2; }
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=$REPO/bench/results/metadata
JSONL=$RESULTS/metadata-$STAMP.jsonl
MD=$RESULTS/metadata-$STAMP.md
LOG=$WORK/logs/metadata-$STAMP.log
mkdir -p "$RESULTS" "$WORK/logs" "$WORK/mnt" || exit 1
: >"$JSONL"
# shellcheck source=bench/lib/lib.sh
source "$REPO/bench/lib/lib.sh"
trap bench_cleanup EXIT
build_readbench || exit 1
M=$WORK/mnt/metadata
LIST=$WORK/metadata-paths-$FILES-$PATHS
"$GENTAR" --files "$FILES" --list "$PATHS" --list-seed 7 >"$LIST" || exit 1
mem() { printf '{"rss_kb":%s,"hwm_kb":%s}' "$(proc_kb "$1" VmRSS)" "$(proc_kb "$1" VmHWM)"; }

for store in "${STORES[@]}"; do
  name=$(basename "$store")
  info=$("$DSFS" info --json "$store" | tr -d '\n')
  rec "$name" _ info "$info"
  rec "$name" _ store_bytes "$(stat -c %s "$store")"
  # 1. FUSE mount and the root's listing.
  drop_caches
  t0=$EPOCHREALTIME
  mount_fs dsfs "$store" "$M" "" || exit 1
  ls "$M" >/dev/null
  rec "$name" fuse mount_ls_s "$(elapsed "$t0" "$EPOCHREALTIME")"
  rec "$name" fuse mount_s "$MOUNT_S"
  rec "$name" fuse rss_after_mount "$(mem "$DAEMON_PID")"
  # 2. lstat storm.
  rec "$name" fuse stat "$(rb "$M" --list "$LIST" --stat --threads 1 --passes 2 | jarray)"
  rec "$name" fuse rss_after_stat "$(mem "$DAEMON_PID")"
  unmount "$M"
  # 3. -o kernel: the layout reads every inode.
  drop_caches
  klog=$WORK/logs/metadata-$STAMP-$name-kernel.log
  t0=$EPOCHREALTIME
  if timeout 300 "$DSFS" mount "$store" "$M" -o "kernel,log_level=info,log_file=$klog" >>"$LOG" 2>&1; then
    rec "$name" kernel mount_s "$(elapsed "$t0" "$EPOCHREALTIME")"
    layout=$(grep -o 'laid out in [0-9.]* s' "$klog" | tail -1 | grep -o '[0-9.]*')
    rec "$name" kernel layout_s "${layout:-null}"
    pid=$(dsfs_daemon_pid "$(realpath "$M")")
    [[ -n $pid ]] && rec "$name" kernel rss_after_mount "$(mem "$pid")"
    t1=$EPOCHREALTIME
    ls "$M/$(ls "$M" | head -1)" >/dev/null
    rec "$name" kernel first_dir_s "$(elapsed "$t1" "$EPOCHREALTIME")"
    "$DSFS" umount "$M" >>"$LOG" 2>&1 || umount -l "$M"
  else
    rec "$name" kernel mount_s null "dsfs mount -o kernel failed (see $LOG)"
  fi
done

render
log "wrote $MD"
