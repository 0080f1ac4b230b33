# bench/lib/lib.sh: shell helpers shared by the bench/*_bench.sh scripts (sourced, not run).
#
# The sourcing script sets before use: LOG (log file), JSONL (raw figures), DSFS (the binary),
# REPO, WORK. It calls bench_cleanup from its EXIT trap: that unmounts everything mounted here and
# waits for (or kills) only the daemons this script started.

# shellcheck shell=bash
PY=${PY:-/usr/bin/python3}

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

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
}

# ---------------------------------------------------------------------------------------------
# Daemon accounting: CPU seconds (utime + stime) and memory of a process, from /proc.
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

# dsfs_daemon_pid MOUNTPOINT: the PID of the `dsfs mount ... MOUNTPOINT` daemon (the forked child;
# its command line is the parent's), found with bash builtins only so that no helper process
# whose own command line names the mountpoint can match.
dsfs_daemon_pid() {
  local m=$1 d args a mount_seen
  for d in /proc/[0-9]*; do
    args=()
    mapfile -d '' -t args <"$d/cmdline" 2>/dev/null || continue
    ((${#args[@]} >= 3)) || continue
    mount_seen=0
    for a in "${args[@]}"; do
      [[ $a == mount ]] && mount_seen=1
      if ((mount_seen)) && [[ $a == "$m" ]]; then
        [[ ${args[0]} == "$DSFS" || ${args[0]##*/} == dsfs* ]] && { echo "${d#/proc/}"; return 0; }
      fi
    done
  done
  return 1
}

# proc_cpu_s PID: utime + stime in seconds
proc_cpu_s() {
  local line rest f
  line=$(<"/proc/$1/stat") 2>/dev/null || return 1
  rest=${line##*) }
  read -r -a f <<<"$rest"
  # fields after the comm: state(3) ... utime is field 14, stime 15 -> index 11, 12 here
  awk -v u="${f[11]}" -v s="${f[12]}" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (u + s) / hz }'
}

# proc_kb PID FIELD: a kB figure from /proc/PID/status (VmRSS, VmHWM, ...)
proc_kb() {
  local k v _
  while read -r k v _; do
    [[ $k == "$2:" ]] && { echo "$v"; return 0; }
  done <"/proc/$1/status" 2>/dev/null
  return 1
}

# daemon_usage PID: {"pid","cpu_s","hwm_kb","rss_kb"} of a live process
daemon_usage() {
  local pid=$1
  [[ -n $pid && -r /proc/$pid/stat ]] || { echo null; return 1; }
  printf '{"pid":%d,"cpu_s":%s,"hwm_kb":%s,"rss_kb":%s}' "$pid" "$(proc_cpu_s "$pid")" \
    "$(proc_kb "$pid" VmHWM || echo null)" "$(proc_kb "$pid" VmRSS || echo null)"
}

# ---------------------------------------------------------------------------------------------
# Mount bookkeeping: what this script mounted, and the PIDs it started.
declare -A KIND=()   # mountpoint -> tmpfs | sqfs | dsfs
declare -A PID_OF=() # mountpoint -> PID of the daemon (squashfuse_ll we started, dsfs found)
declare -A MOUNT_DS=() # mountpoint -> data set name, for the usage record at unmount
declare -A MOUNT_PHASE=() # mountpoint -> what the mount was for

is_mounted() { findmnt -rn --mountpoint "$1" >/dev/null 2>&1; }

# unmount MOUNTPOINT: records the daemon's CPU and peak RSS (metric daemon_usage, when the mount
# was made with a data set name), unmounts, and waits for the daemon to end.
unmount() {
  local m=$1 kind=${KIND[$1]:-} pid=${PID_OF[$1]:-} i usage
  if [[ -n $pid && -n ${MOUNT_DS[$m]:-} ]] && kill -0 "$pid" 2>/dev/null; then
    usage=$(daemon_usage "$pid")
    [[ $usage == \{* ]] && rec "${MOUNT_DS[$m]}" "$kind" daemon_usage \
      "${usage%\}},\"phase\":\"${MOUNT_PHASE[$m]:-}\"}"
  fi
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
      log "$kind daemon $pid still running after unmount; killing it"
      kill "$pid" 2>/dev/null
    fi
    [[ $kind == sqfs ]] && wait "$pid" 2>/dev/null
  fi
  unset "KIND[$m]" "PID_OF[$m]" "MOUNT_DS[$m]" "MOUNT_PHASE[$m]"
}

bench_cleanup() {
  local m
  for m in "${!KIND[@]}"; do unmount "$m"; done
}

# Waits until the mount answers.
wait_mounted() {
  local m=$1 pid=${2:-} i
  for ((i = 0; i < 30000; i++)); do
    mountpoint -q "$m" 2>/dev/null && return 0
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.002
  done
  return 1
}

# mount_fs KIND STORE MOUNTPOINT [DSFS_OPTS [DS PHASE]]: mounts; sets MOUNT_S (seconds until the
# mount answered; for dsfs until `dsfs mount` returned) and DAEMON_PID. DSFS_OPTS defaults to
# $DSFS_MOUNT_OPTS. With DS, unmount records the daemon's usage under that data set.
mount_fs() {
  local kind=$1 store=$2 m=$3 dopts=${4-${DSFS_MOUNT_OPTS:-}} t0 pid
  mkdir -p "$m"
  is_mounted "$m" && unmount "$m"
  KIND[$m]=$kind
  [[ -n ${5:-} ]] && MOUNT_DS[$m]=$5
  MOUNT_PHASE[$m]=${6:-}
  MOUNT_S=
  DAEMON_PID=
  t0=$EPOCHREALTIME
  case $kind in
    sqfs)
      squashfuse_ll -f "$store" "$m" >>"$LOG" 2>&1 &
      pid=$!
      PID_OF[$m]=$pid
      if wait_mounted "$m" "$pid"; then
        MOUNT_S=$(elapsed "$t0" "$EPOCHREALTIME")
        DAEMON_PID=$pid
        return 0
      fi
      ;;
    dsfs)
      local opts=()
      [[ -n $dopts ]] && opts=(-o "$dopts")
      if timeout 120 "$DSFS" mount "$store" "$m" "${opts[@]}" >>"$LOG" 2>&1; then
        local t1=$EPOCHREALTIME
        if mountpoint -q "$m"; then
          MOUNT_S=$(elapsed "$t0" "$t1")
          DAEMON_PID=$(dsfs_daemon_pid "$(realpath "$m")")
          PID_OF[$m]=$DAEMON_PID
          return 0
        fi
      fi
      ;;
  esac
  log "mount of $store ($kind) on $m failed"
  unmount "$m"
  return 1
}

# build_readbench [DIR]: builds the bench tools on their own (Release) into DIR (default: a dir
# under WORK named after this checkout); sets RB (dsfs-readbench) and GENTAR (dsfs-gentar).
build_readbench() {
  local dir=${1:-$WORK/bench-tools-$(printf %s "$REPO" | cksum | cut -d' ' -f1)}
  if { cmake -S "$REPO/bench/tools" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$dir"; } >>"$LOG" 2>&1; then
    RB=$dir/dsfs-readbench
    GENTAR=$dir/dsfs-gentar
  else
    log "dsfs-readbench did not build (see $LOG)"
    RB=false
    return 1
  fi
}

READ_TIMEOUT=${BENCH_READ_TIMEOUT:-600}
rb() { timeout -k 10 "$READ_TIMEOUT" "$RB" "$@" 2>>"$LOG"; }
