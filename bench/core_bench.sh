#!/usr/bin/env bash
# bench/core_bench.sh: the core benchmark of dsfs against its peers, in one run.
#
#   bench/core_bench.sh [--work DIR] [--build-dir DIR] [--photos N] [--datasets "fmnist photo32"]
#                       [--quick] [--skip-setup] [--skip-build] [--cold-limit N]
#                       [--if-samples N] [--if-epochs N] [--hot-passes N]
#
# (a) bench/setup.sh, then a Release build of the dsfs target into build/ (or --build-dir); a
#     missing or failing dsfs is reported and the peers are measured all the same.
#     dsfs-readbench is built on its own, under the work dir.
# (b) the data sets under the work dir (default /var/tmp/dsfs-bench, or $BENCH_WORK):
#     fmnist (Fashion-MNIST, 70,000 28x28 PNGs) and photo32 (150,000 32x32 JPEG photo crops).
# (c) per data set, side by side: pack time and size of `dsfs pack` and of
#     `mksquashfs -comp zstd` (default 128 KiB blocks); mount time of dsfs and squashfuse_ll;
#     shuffled open+read+close files/s with 4 and 1 threads on the source directory (ext4),
#     a tmpfs copy, squashfuse_ll and dsfs, hot (median of passes after a warm one) and cold
#     (after drop_caches, FUSE daemons restarted); lstat files/s; ImageFolder images/s
#     (2 workers) on all four.
# Writes bench/results/core-<date>.md (and .jsonl with every raw figure) and prints the table.
# Mounts only under WORK/mnt, unmounts them on exit, and kills only the PIDs it started.
#
# Environment: DSFS (the binary, default BUILD_DIR/dsfs), BENCH_BUILD_DIR, DSFS_PACK_OPTS,
# DSFS_MOUNT_OPTS (an -o list), BENCH_WORK, BENCH_PHOTOS, BENCH_FMNIST_LIMIT, BENCH_DATASETS, BENCH_COLD_LIMIT,
# BENCH_IF_SAMPLES, BENCH_IF_EPOCHS, BENCH_HOT_PASSES, BENCH_READ_TIMEOUT, BENCH_IF_TIMEOUT.
set -uo pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
WORK=${BENCH_WORK:-/var/tmp/dsfs-bench}
PHOTOS=${BENCH_PHOTOS:-150000}
FMNIST_LIMIT=${BENCH_FMNIST_LIMIT:-0}
DATASETS=${BENCH_DATASETS:-"fmnist photo32"}
COLD_LIMIT=${BENCH_COLD_LIMIT:-0}        # files per cold pass (0: all)
IF_SAMPLES=${BENCH_IF_SAMPLES:-25000}    # images per ImageFolder epoch (0: all)
IF_EPOCHS=${BENCH_IF_EPOCHS:-2}
HOT_PASSES=${BENCH_HOT_PASSES:-3}        # measured hot passes, after one warm pass
READ_TIMEOUT=${BENCH_READ_TIMEOUT:-600}  # seconds for one dsfs-readbench run
IF_TIMEOUT=${BENCH_IF_TIMEOUT:-900}      # seconds for one ImageFolder run
BUILD_DIR=${BENCH_BUILD_DIR:-$REPO/build}
SKIP_SETUP=0
SKIP_BUILD=0

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
  case $1 in
    --work) WORK=$2; shift ;;
    --build-dir) BUILD_DIR=$2; shift ;;
    --photos) PHOTOS=$2; shift ;;
    --datasets) DATASETS=$2; shift ;;
    --cold-limit) COLD_LIMIT=$2; shift ;;
    --if-samples) IF_SAMPLES=$2; shift ;;
    --if-epochs) IF_EPOCHS=$2; shift ;;
    --hot-passes) HOT_PASSES=$2; shift ;;
    --skip-setup) SKIP_SETUP=1 ;;
    --skip-build) SKIP_BUILD=1 ;;
    --quick) PHOTOS=20000; FMNIST_LIMIT=20000; IF_SAMPLES=10000; IF_EPOCHS=2; HOT_PASSES=2 ;;
    -h|--help) usage 0 ;;
    *) echo "core_bench: unknown argument $1" >&2; usage 2 ;;
  esac
  shift
done

DSFS=${DSFS:-$BUILD_DIR/dsfs}
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=$REPO/bench/results
MD=$RESULTS/core-$STAMP.md
JSONL=$RESULTS/core-$STAMP.jsonl
LOGDIR=$WORK/logs
LOG=$LOGDIR/core-$STAMP.log
MNT=$WORK/mnt
mkdir -p "$RESULTS" "$LOGDIR" "$MNT" || exit 1
: >"$JSONL"

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" | tee -a "$LOG" >&2; }
# rec DS SYS METRIC JSON [NOTE]: one raw figure for the report
rec() {
  local note=${5:-}
  note=${note//\\/}; note=${note//\"/\'}
  printf '{"ds":"%s","sys":"%s","metric":"%s","data":%s,"note":"%s"}\n' \
    "$1" "$2" "$3" "${4:-null}" "$note" >>"$JSONL"
}
# lines of JSON on stdin -> one JSON array
jarray() { local a; a=$(grep '^{' | paste -sd, -); echo "[$a]"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }

# ---------------------------------------------------------------------------------------------
# Mount bookkeeping: what this script mounted, and the PIDs it started.
declare -A KIND=()   # mountpoint -> tmpfs | sqfs | dsfs
declare -A PID_OF=() # mountpoint -> PID of the squashfuse_ll we started in the foreground

is_mounted() { findmnt -rn --mountpoint "$1" >/dev/null 2>&1; }

unmount() {
  local m=$1 kind=${KIND[$1]:-} pid=${PID_OF[$1]:-} i
  if is_mounted "$m"; then
    case $kind in
      dsfs) timeout 60 "$DSFS" umount "$m" >>"$LOG" 2>&1 || fusermount3 -u "$m" >>"$LOG" 2>&1 ;;
      sqfs) fusermount3 -u "$m" >>"$LOG" 2>&1 ;;
      *) umount "$m" >>"$LOG" 2>&1 ;;
    esac
    for ((i = 0; i < 100; i++)); do is_mounted "$m" || break; sleep 0.05; done
    if is_mounted "$m"; then
      log "unmount of $m failed; lazy unmount"
      umount -l "$m" >>"$LOG" 2>&1
    fi
  fi
  if [[ -n $pid ]]; then
    for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then
      log "squashfuse_ll $pid still running after unmount; killing it"
      kill "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  fi
  unset "KIND[$m]" "PID_OF[$m]"
}

cleanup_done=0
cleanup() {
  ((cleanup_done)) && return
  cleanup_done=1
  local m
  for m in "${!KIND[@]}"; do unmount "$m"; done
  if [[ -s $JSONL ]]; then
    "$PY" "$REPO/bench/report.py" "$JSONL" --work "$WORK" --repo "$REPO" --out "$MD" \
      --log "$LOG" && { echo; cat "$MD"; echo; log "results: $MD"; }
  fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# Waits until the mount answers (stat of its root goes through the file system).
wait_mounted() {
  local m=$1 pid=${2:-} i
  for ((i = 0; i < 30000; i++)); do
    mountpoint -q "$m" 2>/dev/null && return 0
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.002
  done
  return 1
}

# mount_fs KIND STORE MOUNTPOINT: mounts, sets MOUNT_S (seconds until the mount answered).
mount_fs() {
  local kind=$1 store=$2 m=$3 t0 pid
  mkdir -p "$m"
  is_mounted "$m" && unmount "$m"
  KIND[$m]=$kind
  MOUNT_S=
  t0=$EPOCHREALTIME
  case $kind in
    sqfs)
      squashfuse_ll -f "$store" "$m" >>"$LOG" 2>&1 &
      pid=$!
      PID_OF[$m]=$pid
      if wait_mounted "$m" "$pid"; then MOUNT_S=$(elapsed "$t0" "$EPOCHREALTIME"); return 0; fi
      ;;
    dsfs)
      local opts=()
      [[ -n ${DSFS_MOUNT_OPTS:-} ]] && opts=(-o "$DSFS_MOUNT_OPTS")
      if timeout 120 "$DSFS" mount "$store" "$m" "${opts[@]}" >>"$LOG" 2>&1; then
        local t1=$EPOCHREALTIME
        if mountpoint -q "$m"; then MOUNT_S=$(elapsed "$t0" "$t1"); return 0; fi
      fi
      ;;
  esac
  log "mount of $store ($kind) on $m failed"
  unmount "$m"
  return 1
}

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
}

RB=
rb() { timeout -k 10 "$READ_TIMEOUT" "$RB" "$@" 2>>"$LOG"; }

# hot_reads DS SYS ROOT LIST: 4 then 1 thread(s), a warm pass and HOT_PASSES measured passes
# (the first pass of the 4-thread run is the first touch after mount for FUSE); then lstat.
hot_reads() {
  local ds=$1 sys=$2 root=$3 list=$4 t out
  for t in 4 1; do
    log "$ds/$sys: read, $t thread(s), hot"
    out=$(rb "$root" --list "$list" --threads "$t" --passes $((HOT_PASSES + 1)) --label "$ds/$sys hot")
    rec "$ds" "$sys" "read_hot_t$t" "$(jarray <<<"$out")"
  done
  log "$ds/$sys: lstat, 4 threads, hot"
  out=$(rb "$root" --list "$list" --threads 4 --stat --passes 2 --label "$ds/$sys stat")
  rec "$ds" "$sys" stat_hot_t4 "$(jarray <<<"$out")"
}

# cold_reads DS SYS ROOT LIST [KIND STORE]: per thread count, drop caches (and restart the FUSE
# daemon) then one pass.
cold_reads() {
  local ds=$1 sys=$2 root=$3 list=$4 kind=${5:-} store=${6:-} t out lim=()
  ((COLD_LIMIT > 0)) && lim=(--limit "$COLD_LIMIT")
  for t in 4 1; do
    [[ -n $kind ]] && unmount "$root"
    if ! drop_caches; then
      rec "$ds" "$sys" "read_cold_t$t" null "drop_caches not writable"
      continue
    fi
    if [[ -n $kind ]]; then
      if ! mount_fs "$kind" "$store" "$root"; then
        rec "$ds" "$sys" "read_cold_t$t" null "remount failed"
        continue
      fi
      rec "$ds" "$sys" mount_cold_s "$MOUNT_S"
    fi
    log "$ds/$sys: read, $t thread(s), cold"
    out=$(rb "$root" --list "$list" --threads "$t" --passes 1 "${lim[@]}" --label "$ds/$sys cold")
    rec "$ds" "$sys" "read_cold_t$t" "$(jarray <<<"$out")"
  done
}

imagefolder() {
  local ds=$1 sys=$2 root=$3 out args=(--epochs "$IF_EPOCHS" --workers 2 --batch 256)
  ((IF_SAMPLES > 0)) && args+=(--samples "$IF_SAMPLES")
  log "$ds/$sys: ImageFolder ${args[*]}"
  out=$(timeout -k 10 "$IF_TIMEOUT" "$PY" "$REPO/bench/imagefolder_read.py" "$root" "${args[@]}" \
    --label "$ds/$sys" 2>>"$LOG")
  rec "$ds" "$sys" imagefolder "$(jarray <<<"$out")"
}

# ---------------------------------------------------------------------------------------------
# (a) setup and builds
log "work dir $WORK, log $LOG"
rec _ run config "$(printf '{"work":"%s","photos":%d,"fmnist_limit":%d,"datasets":"%s","cold_limit":%d,"if_samples":%d,"if_epochs":%d,"hot_passes":%d,"dsfs":"%s","dsfs_pack_opts":"%s","dsfs_mount_opts":"%s"}' \
  "$WORK" "$PHOTOS" "$FMNIST_LIMIT" "$DATASETS" "$COLD_LIMIT" "$IF_SAMPLES" "$IF_EPOCHS" "$HOT_PASSES" \
  "$DSFS" "${DSFS_PACK_OPTS:-}" "${DSFS_MOUNT_OPTS:-}")"

if ((!SKIP_SETUP)); then
  log "bench/setup.sh"
  bash "$REPO/bench/setup.sh" >>"$LOG" 2>&1 || log "bench/setup.sh failed (see $LOG); going on"
fi

DSFS_STATE=ok
if ((!SKIP_BUILD)) && [[ -f $REPO/CMakeLists.txt ]]; then
  log "building dsfs (Release) into $BUILD_DIR"
  if ! { cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
    timeout 1800 cmake --build "$BUILD_DIR" --target dsfs; } >>"$LOG" 2>&1; then
    log "dsfs build failed (see $LOG)"
    DSFS_STATE="build failed"
  fi
elif ((!SKIP_BUILD)); then
  DSFS_STATE="missing (no CMakeLists.txt yet)"
fi
if [[ $DSFS_STATE == ok && ! -x $DSFS ]]; then
  DSFS_STATE="missing ($DSFS not built)"
fi
log "dsfs: $DSFS_STATE"
if [[ -x $DSFS ]]; then
  rec _ dsfs binary "$(printf '{"path":"%s","version":"%s","built":"%s"}' "$DSFS" \
    "$("$DSFS" --version 2>/dev/null | head -1 | tr -d '"\\')" "$(date -r "$DSFS" '+%F %T')")"
fi
rec _ dsfs state '"'"${DSFS_STATE//\"/}"'"'

RBBUILD=$WORK/readbench-build
log "building dsfs-readbench into $RBBUILD"
if { cmake -S "$REPO/bench" -B "$RBBUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$RBBUILD"; } >>"$LOG" 2>&1; then
  RB=$RBBUILD/dsfs-readbench
else
  log "dsfs-readbench did not build (see $LOG); no read figures"
  RB=false
fi

# ---------------------------------------------------------------------------------------------
# (b) data sets
src_of() {
  case $1 in
    fmnist) if ((FMNIST_LIMIT > 0)); then echo "$WORK/fmnist_$FMNIST_LIMIT"; else echo "$WORK/fmnist"; fi ;;
    photo32) if ((PHOTOS == 150000)); then echo "$WORK/photo32"; else echo "$WORK/photo32_$PHOTOS"; fi ;;
  esac
}
make_dataset() {
  local ds=$1 src
  src=$(src_of "$ds")
  case $ds in
    fmnist) "$PY" "$REPO/bench/datasets.py" fashion-mnist "$src" --limit "$FMNIST_LIMIT" ;;
    photo32) "$PY" "$REPO/bench/datasets.py" photo-crops "$src" --count "$PHOTOS" ;;
    *) echo "unknown data set $ds" >&2; return 1 ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# (c) measurements
run_dataset() {
  local ds=$1 src list n t0 out sz
  src=$(src_of "$ds")
  log "== $ds: building $src"
  if ! make_dataset "$ds" >>"$LOG" 2>&1; then
    log "$ds: data set failed (see $LOG)"
    rec "$ds" ext4 files null "data set failed"
    return
  fi
  local name
  name=$(basename "$src")
  list=$WORK/$name.list
  rb "$src" --write-list "$list" || { rec "$ds" ext4 files null "listing failed"; return; }
  n=$(wc -l <"$list")
  rec "$ds" ext4 files "$n"
  rec "$ds" ext4 bytes "$(find "$src" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }')"
  rec "$ds" _ loadavg "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
  rec "$ds" ext4 size_bytes "$(du -sB1 "$src" | cut -f1)"
  rec "$ds" ext4 path "\"$src\""

  # squashfs image
  local sq=$WORK/$name.sqfs
  log "$ds: mksquashfs -comp zstd"
  t0=$EPOCHREALTIME
  if mksquashfs "$src" "$sq" -comp zstd -noappend -quiet -no-progress >>"$LOG" 2>&1; then
    rec "$ds" sqfs pack_s "$(elapsed "$t0" "$EPOCHREALTIME")"
    rec "$ds" sqfs size_bytes "$(stat -c %s "$sq")"
  else
    rec "$ds" sqfs pack_s null "mksquashfs failed"
    sq=
  fi

  # dsfs store
  local store=$WORK/$name.dsfs dsfs_ok=0
  if [[ $DSFS_STATE == ok ]]; then
    log "$ds: dsfs pack"
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086
    if timeout 1800 "$DSFS" pack "$src" "$store" --force ${DSFS_PACK_OPTS:-} >>"$LOG" 2>&1; then
      rec "$ds" dsfs pack_s "$(elapsed "$t0" "$EPOCHREALTIME")"
      rec "$ds" dsfs size_bytes "$(stat -c %s "$store")"
      out=$(timeout 60 "$DSFS" info "$store" --json 2>>"$LOG" | tr -d '\n')
      [[ $out == \{* ]] && rec "$ds" dsfs info "$out"
      dsfs_ok=1
    else
      rec "$ds" dsfs pack_s null "dsfs pack failed"
    fi
  else
    rec "$ds" dsfs pack_s null "dsfs $DSFS_STATE"
  fi

  # ext4, the source directory
  hot_reads "$ds" ext4 "$src" "$list"
  imagefolder "$ds" ext4 "$src"
  cold_reads "$ds" ext4 "$src" "$list"

  # tmpfs copy
  local tm=$MNT/tmpfs-$ds
  mkdir -p "$tm"
  is_mounted "$tm" && unmount "$tm"
  sz=$(du -sB1 "$src" | cut -f1)
  if mount -t tmpfs -o "size=$((sz * 2 + (256 << 20))),mode=0755" dsfs-bench-tmpfs "$tm" >>"$LOG" 2>&1; then
    KIND[$tm]=tmpfs
    log "$ds: copy to tmpfs"
    t0=$EPOCHREALTIME
    if cp -a "$src/." "$tm/" >>"$LOG" 2>&1; then
      rec "$ds" tmpfs copy_s "$(elapsed "$t0" "$EPOCHREALTIME")"
      rec "$ds" tmpfs size_bytes "$(df -B1 --output=used "$tm" | tail -1 | tr -d ' ')"
      hot_reads "$ds" tmpfs "$tm" "$list"
      imagefolder "$ds" tmpfs "$tm"
    else
      rec "$ds" tmpfs copy_s null "copy failed"
    fi
    unmount "$tm"
  else
    rec "$ds" tmpfs copy_s null "tmpfs mount failed"
  fi

  # squashfuse_ll
  local sm=$MNT/sqfs-$ds
  if [[ -n $sq ]]; then
    if mount_fs sqfs "$sq" "$sm"; then
      rec "$ds" sqfs mount_s "$MOUNT_S"
      hot_reads "$ds" sqfs "$sm" "$list"
      imagefolder "$ds" sqfs "$sm"
      cold_reads "$ds" sqfs "$sm" "$list" sqfs "$sq"
      unmount "$sm"
    else
      rec "$ds" sqfs mount_s null "squashfuse_ll mount failed"
    fi
  fi

  # dsfs
  local dm=$MNT/dsfs-$ds
  if ((dsfs_ok)); then
    if mount_fs dsfs "$store" "$dm"; then
      rec "$ds" dsfs mount_s "$MOUNT_S"
      hot_reads "$ds" dsfs "$dm" "$list"
      imagefolder "$ds" dsfs "$dm"
      cold_reads "$ds" dsfs "$dm" "$list" dsfs "$store"
      unmount "$dm"
    else
      rec "$ds" dsfs mount_s null "dsfs mount failed"
    fi
  fi
  rec "$ds" _ loadavg_end "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
  log "== $ds done"
}

T_START=$EPOCHREALTIME
for ds in $DATASETS; do
  run_dataset "$ds"
done
rec _ run total_s "$(elapsed "$T_START" "$EPOCHREALTIME")"
log "all done in $(elapsed "$T_START" "$EPOCHREALTIME") s"
exit 0
