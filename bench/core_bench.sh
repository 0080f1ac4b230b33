#!/usr/bin/env bash
# bench/core_bench.sh: the core benchmark of dsfs against its peers, in one run.
#
#   bench/core_bench.sh [--work DIR] [--build-dir DIR] [--photos N] [--datasets "fmnist photo32 seq1g"]
#                       [--quick] [--skip-setup] [--skip-build] [--cold-limit N]
#                       [--if-subset N] [--if-epochs N] [--hot-passes N]
#
# (a) bench/setup.sh, then `cmake --build` of the dsfs target in build/ (or --build-dir; a build
#     dir that does not exist yet is configured RelWithDebInfo, an existing one keeps its build
#     type); a missing or failing dsfs is reported and the peers are measured all the same.
#     DSFS=/path/to/dsfs --skip-build measures another binary (e.g. a Release build of HEAD).
#     dsfs-readbench is built on its own, under the work dir.
# (b) the data sets under the work dir (default /var/tmp/dsfs-bench, or $BENCH_WORK):
#     fmnist (Fashion-MNIST, 70,000 28x28 PNGs), photo32 (150,000 32x32 JPEG photo crops) and
#     seq1g (one 1 GiB file: those JPEGs and PNGs concatenated, partly compressible).
# (c) per data set, side by side on the source directory (ext4), a tmpfs copy, squashfuse_ll
#     and dsfs: pack time and size (`dsfs pack`, `mksquashfs -comp zstd`); mount time;
#     shuffled open+read+close files/s with 4 and 1 threads: hot (median of passes after a warm
#     one), and first touch after drop_caches (FUSE daemons restarted) with a `find` over the
#     tree first and without; `find` of the whole tree (cold and hot) and lstat files/s;
#     ImageFolder (2 workers, batch 256, shuffled) images/s, first epoch after drop_caches (its
#     scan is the `find`) and second epoch over the same images; for seq1g sequential read MB/s
#     of the 1 GiB file, cold and hot; CPU seconds and peak RSS of every FUSE daemon.
#     The report has a "targets" section (bench/lib/targets.json: target, measured, met?).
# Writes bench/results/core/core-<date>.md (and .jsonl with every raw figure) and prints the table.
# Mounts only under WORK/mnt, unmounts them on exit, and kills only the PIDs it started.
#
# Environment: DSFS (the binary, default BUILD_DIR/dsfs), BENCH_BUILD_DIR, DSFS_PACK_OPTS,
# DSFS_MOUNT_OPTS (an -o list), BENCH_WORK, BENCH_PHOTOS, BENCH_FMNIST_LIMIT, BENCH_DATASETS,
# BENCH_COLD_LIMIT, BENCH_IF_SUBSET, BENCH_IF_EPOCHS, BENCH_HOT_PASSES, BENCH_READ_TIMEOUT,
# BENCH_IF_TIMEOUT, BENCH_SEQ_SIZE, DSFS_DESC (how the binary was built, for the report).
set -uo pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${BENCH_WORK:-/var/tmp/dsfs-bench}
PHOTOS=${BENCH_PHOTOS:-150000}
FMNIST_LIMIT=${BENCH_FMNIST_LIMIT:-0}
DATASETS=${BENCH_DATASETS:-"fmnist photo32 seq1g"}
COLD_LIMIT=${BENCH_COLD_LIMIT:-50000}    # files per first-touch pass (0: all)
IF_SUBSET=${BENCH_IF_SUBSET:-20000}      # images per ImageFolder epoch, the same each epoch (0: all)
IF_EPOCHS=${BENCH_IF_EPOCHS:-2}
HOT_PASSES=${BENCH_HOT_PASSES:-3}        # measured hot passes, after one warm pass
IF_TIMEOUT=${BENCH_IF_TIMEOUT:-600}      # seconds for one ImageFolder run
SEQ_SIZE=${BENCH_SEQ_SIZE:-1G}
BUILD_DIR=${BENCH_BUILD_DIR:-$REPO/build}
SKIP_SETUP=0
SKIP_BUILD=0

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
  case $1 in
    --work) WORK=$2; shift ;;
    --build-dir) BUILD_DIR=$2; shift ;;
    --photos) PHOTOS=$2; shift ;;
    --datasets) DATASETS=$2; shift ;;
    --cold-limit) COLD_LIMIT=$2; shift ;;
    --if-subset) IF_SUBSET=$2; shift ;;
    --if-epochs) IF_EPOCHS=$2; shift ;;
    --hot-passes) HOT_PASSES=$2; shift ;;
    --skip-setup) SKIP_SETUP=1 ;;
    --skip-build) SKIP_BUILD=1 ;;
    --quick) PHOTOS=20000; FMNIST_LIMIT=20000; IF_SUBSET=5000; HOT_PASSES=2; COLD_LIMIT=10000; SEQ_SIZE=256M ;;
    -h|--help) usage 0 ;;
    *) echo "core_bench: unknown argument $1" >&2; usage 2 ;;
  esac
  shift
done

DSFS=${DSFS:-$BUILD_DIR/dsfs}
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=$REPO/bench/results/core
MD=$RESULTS/core-$STAMP.md
JSONL=$RESULTS/core-$STAMP.jsonl
LOGDIR=$WORK/logs
LOG=$LOGDIR/core-$STAMP.log
MNT=$WORK/mnt
mkdir -p "$RESULTS" "$LOGDIR" "$MNT" || exit 1
: >"$JSONL"
# shellcheck source=bench/lib/lib.sh
source "$REPO/bench/lib/lib.sh"

cleanup_done=0
cleanup() {
  ((cleanup_done)) && return
  cleanup_done=1
  bench_cleanup
  if [[ -s $JSONL ]]; then
    "$PY" "$REPO/bench/lib/report.py" "$JSONL" --work "$WORK" --repo "$REPO" --out "$MD" \
      --log "$LOG" && { echo; cat "$MD"; echo; log "results: $MD"; }
    # The charts of this run and the README's, beside the results (bench/lib/plot.py).
    "$PY" "$REPO/bench/lib/plot.py" "$JSONL" || log "charts not drawn (bench/lib/plot.py failed)"
  fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# remount_cold DS SYS ROOT KIND STORE PHASE: for a FUSE system, unmount; drop caches; mount again
# (recording the mount time after drop_caches). Returns 1 when caches or the mount fail.
remount_cold() {
  local ds=$1 sys=$2 root=$3 kind=$4 store=$5 phase=$6
  [[ -n $kind ]] && unmount "$root"
  if ! drop_caches; then
    rec "$ds" "$sys" "$phase" null "drop_caches not writable"
    return 1
  fi
  if [[ -n $kind ]]; then
    if ! mount_fs "$kind" "$store" "$root" "${DSFS_MOUNT_OPTS:-}" "$ds" "$phase"; then
      rec "$ds" "$sys" "$phase" null "remount failed"
      return 1
    fi
    rec "$ds" "$sys" mount_cold_s "$MOUNT_S"
  fi
}

# time_find ROOT: seconds for `find ROOT` (names only, as a scan does)
time_find() {
  local t0=$EPOCHREALTIME
  find "$1" >/dev/null 2>>"$LOG"
  elapsed "$t0" "$EPOCHREALTIME"
}

# dsfs_stats DS ROOT WHAT: the daemon's counters after a phase
dsfs_stats() {
  local out
  out=$(timeout 10 cat "$2/.dsfs/stats" 2>/dev/null | tr -d '\n')
  [[ $out == \{* ]] && rec "$1" dsfs "stats_$3" "$out"
}

# hot_reads DS SYS ROOT LIST: 4 then 1 thread(s), a warm pass and HOT_PASSES measured passes
# (the first pass of the 4-thread run is the first touch after mount for FUSE); then lstat and
# a hot `find`.
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
  find "$root" >/dev/null 2>&1
  rec "$ds" "$sys" find_hot_s "$(time_find "$root")"
  [[ $sys == dsfs ]] && dsfs_stats "$ds" "$root" hot
}

# first_touch DS SYS ROOT LIST [KIND STORE]: per thread count (4, 1) and with / without a `find`
# over the tree first: drop caches (and restart the FUSE daemon), [find], one read pass.
first_touch() {
  local ds=$1 sys=$2 root=$3 list=$4 kind=${5:-} store=${6:-} t f out lim=() metric
  ((COLD_LIMIT > 0)) && lim=(--limit "$COLD_LIMIT")
  for t in 4 1; do
    for f in find nofind; do
      metric=read_first_${f}_t$t
      remount_cold "$ds" "$sys" "$root" "$kind" "$store" "$metric" || continue
      if [[ $f == find ]]; then
        rec "$ds" "$sys" find_cold_s "$(time_find "$root")"
      fi
      log "$ds/$sys: read, $t thread(s), first touch, $f"
      out=$(rb "$root" --list "$list" --threads "$t" --passes 1 "${lim[@]}" --label "$ds/$sys first $f")
      rec "$ds" "$sys" "$metric" "$(jarray <<<"$out")"
      [[ $sys == dsfs ]] && dsfs_stats "$ds" "$root" "$metric"
    done
  done
}

# imagefolder DS SYS ROOT [KIND STORE]: drop caches (restart the daemon) unless tmpfs, then
# IF_EPOCHS epochs over the same IF_SUBSET images.
imagefolder() {
  local ds=$1 sys=$2 root=$3 kind=${4:-} store=${5:-} out args=(--epochs "$IF_EPOCHS" --workers 2 --batch 256)
  ((IF_SUBSET > 0)) && args+=(--subset "$IF_SUBSET")
  if [[ $sys != tmpfs ]]; then
    remount_cold "$ds" "$sys" "$root" "$kind" "$store" imagefolder || return
  fi
  log "$ds/$sys: ImageFolder ${args[*]}"
  out=$(timeout -k 10 "$IF_TIMEOUT" "$PY" "$REPO/bench/lib/imagefolder_read.py" "$root" "${args[@]}" \
    --label "$ds/$sys" 2>>"$LOG")
  rec "$ds" "$sys" imagefolder "$(jarray <<<"$out")"
  [[ $sys == dsfs ]] && dsfs_stats "$ds" "$root" imagefolder
}

# seq_reads DS SYS FILE [KIND STORE ROOT]: sequential MB/s of one big file, cold (not tmpfs)
# then 3 hot passes.
seq_reads() {
  local ds=$1 sys=$2 file=$3 kind=${4:-} store=${5:-} root=${6:-} out
  if [[ $sys != tmpfs ]]; then
    if remount_cold "$ds" "$sys" "$root" "$kind" "$store" seq_cold; then
      log "$ds/$sys: sequential read, cold"
      out=$(rb --seq "$file" --passes 1 --label "$ds/$sys seq cold")
      rec "$ds" "$sys" seq_cold "$(jarray <<<"$out")"
    fi
  fi
  log "$ds/$sys: sequential read, hot"
  out=$(rb --seq "$file" --passes 4 --label "$ds/$sys seq hot")
  rec "$ds" "$sys" seq_hot "$(jarray <<<"$out")"
}

# ---------------------------------------------------------------------------------------------
# (a) setup and builds
log "work dir $WORK, log $LOG"
rec _ run config "$(printf '{"work":"%s","photos":%d,"fmnist_limit":%d,"datasets":"%s","cold_limit":%d,"if_subset":%d,"if_epochs":%d,"hot_passes":%d,"seq_size":"%s","dsfs":"%s","dsfs_pack_opts":"%s","dsfs_mount_opts":"%s"}' \
  "$WORK" "$PHOTOS" "$FMNIST_LIMIT" "$DATASETS" "$COLD_LIMIT" "$IF_SUBSET" "$IF_EPOCHS" "$HOT_PASSES" \
  "$SEQ_SIZE" "$DSFS" "${DSFS_PACK_OPTS:-}" "${DSFS_MOUNT_OPTS:-}")"

if ((!SKIP_SETUP)); then
  log "bench/setup.sh"
  bash "$REPO/bench/setup.sh" >>"$LOG" 2>&1 || log "bench/setup.sh failed (see $LOG); going on"
fi

DSFS_STATE=ok
if ((!SKIP_BUILD)) && [[ -f $REPO/CMakeLists.txt ]]; then
  log "building dsfs into $BUILD_DIR"
  cfg=()
  [[ -f $BUILD_DIR/CMakeCache.txt ]] || cfg=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
  if ! { cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja "${cfg[@]}" &&
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
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$(dirname "$DSFS")/CMakeCache.txt" 2>/dev/null)
  rec _ dsfs binary "$(printf '{"path":"%s","version":"%s","built":"%s","build_type":"%s"}' "$DSFS" \
    "$("$DSFS" --version 2>/dev/null | head -1 | tr -d '"\\')" "$(date -r "$DSFS" '+%F %T')" "$build_type")"
fi
rec _ dsfs state '"'"${DSFS_STATE//\"/}"'"'
[[ -n ${DSFS_DESC:-} ]] && rec _ dsfs desc "\"${DSFS_DESC//\"/\'}\""

log "building the bench tools (dsfs-readbench, dsfs-gentar)"
build_readbench

# ---------------------------------------------------------------------------------------------
# (b) data sets
src_of() {
  case $1 in
    fmnist) if ((FMNIST_LIMIT > 0)); then echo "$WORK/fmnist_$FMNIST_LIMIT"; else echo "$WORK/fmnist"; fi ;;
    photo32) if ((PHOTOS == 150000)); then echo "$WORK/photo32"; else echo "$WORK/photo32_$PHOTOS"; fi ;;
    seq1g) if [[ $SEQ_SIZE == 1G ]]; then echo "$WORK/seq1g"; else echo "$WORK/seq_$SEQ_SIZE"; fi ;;
  esac
}
make_dataset() {
  local ds=$1 src
  src=$(src_of "$ds")
  case $ds in
    fmnist) "$PY" "$REPO/bench/lib/datasets.py" fashion-mnist "$src" --limit "$FMNIST_LIMIT" ;;
    photo32) "$PY" "$REPO/bench/lib/datasets.py" photo-crops "$src" --count "$PHOTOS" ;;
    seq1g)
      make_dataset photo32 && make_dataset fmnist &&
        "$PY" "$REPO/bench/lib/datasets.py" blob "$src" --from "$(src_of photo32)" \
          --from "$(src_of fmnist)" --size "$SEQ_SIZE" ;;
    *) echo "unknown data set $ds" >&2; return 1 ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# (c) measurements
run_dataset() {
  local ds=$1 src list n t0 out sz seq=0 bigfile=
  [[ $ds == seq1g ]] && seq=1
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
  ((seq)) && bigfile=$(head -1 "$list")
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

  # measure SYS ROOT [KIND STORE]: everything for one system
  measure() {
    local sys=$1 root=$2 kind=${3:-} store=${4:-}
    if ((seq)); then
      seq_reads "$ds" "$sys" "$root/$bigfile" "$kind" "$store" "$root"
      return
    fi
    hot_reads "$ds" "$sys" "$root" "$list"
    [[ $sys != tmpfs ]] && first_touch "$ds" "$sys" "$root" "$list" "$kind" "$store"
    imagefolder "$ds" "$sys" "$root" "$kind" "$store"
  }

  # ext4, the source directory
  measure ext4 "$src"

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
      measure tmpfs "$tm"
    else
      rec "$ds" tmpfs copy_s null "copy failed"
    fi
    unmount "$tm"
  else
    rec "$ds" tmpfs copy_s null "tmpfs mount failed"
  fi

  # squashfuse_ll and dsfs: a first mount with the store file in the page cache (mount time,
  # hot reads), then the cold phases remount after drop_caches.
  local sys img m
  for sys in sqfs dsfs; do
    if [[ $sys == sqfs ]]; then img=$sq; else img=$store; ((dsfs_ok)) || img=; fi
    [[ -n $img ]] || continue
    m=$MNT/$sys-$ds
    cat "$img" >/dev/null
    if mount_fs "$sys" "$img" "$m" "${DSFS_MOUNT_OPTS:-}" "$ds" hot; then
      rec "$ds" "$sys" mount_s "$MOUNT_S"
      measure "$sys" "$m" "$sys" "$img"
      unmount "$m"
    else
      rec "$ds" "$sys" mount_s null "$sys mount failed"
    fi
  done
  rec "$ds" _ loadavg_end "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
  log "== $ds done"
}

T_START=$EPOCHREALTIME
for ds in $DATASETS; do
  run_dataset "$ds"
done
rec _ run total_s "$(elapsed "$T_START" "$EPOCHREALTIME")"
log "all done in $(elapsed "$T_START" "$EPOCHREALTIME") s"
