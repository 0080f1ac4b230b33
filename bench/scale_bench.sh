#!/usr/bin/env bash
# bench/scale_bench.sh: dsfs with 10 million files.
#
#   bench/scale_bench.sh [--work DIR] [--files N] [--classes C] [--stat-paths K]
#                        [--ext4-files N|auto|0] [--from-tree] [--keep-store] [--reuse-store]
#   bench/scale_bench.sh --render RESULTS.jsonl     (writes RESULTS.md from raw figures)
#
# 1. `dsfs-gentar --files N | dsfs pack - STORE` (N default 10,000,000 in 1000 class dirs, files
#    of 100-600 bytes; the generator is bench/tools/gentar.cc, built with the other bench tools), timed;
#    store size. --from-tree (or a dsfs that cannot pack a tar from stdin) writes the tree to disk
#    first and packs the directory instead, and the report says so.
# 2. `dsfs mount` time (until it returns) and the daemon's RSS right after it.
# 3. lstat of K random paths of the set (default 100,000; dsfs-readbench --stat, uniform with
#    replacement), 1 and 4 threads, each after drop_caches and a fresh mount: first pass and a
#    second (hot) pass; the daemon's RSS after these runs.
# 4. The same lstat runs on ext4: a tree of the same paths as empty files. Its creation is timed
#    at 1M files first; --ext4-files auto (default) compares at N when N files should take under
#    5 minutes to create at that pace, else at 1M (the report says which).
#    --ext4-files 0 skips ext4. --reuse-store measures an existing store (no pack figures).
# Writes bench/results/scale/scale-<date>.md (and .jsonl); deletes the trees it made, and the store
# unless it is under 5 GB or --keep-store. Everything under WORK/scale (default /var/tmp/dsfs-bench).
# Environment: DSFS (default build/dsfs), DSFS_DESC (how it was built, for the report), BENCH_WORK, SCALE_PACK_TIMEOUT (s, default 900).
set -uo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${BENCH_WORK:-/var/tmp/dsfs-bench}
DSFS=${DSFS:-$REPO/build/dsfs}
FILES=10000000
CLASSES=1000
STAT_PATHS=100000
EXT4_FILES=auto
FROM_TREE=0
KEEP=0
REUSE=0
RENDER=
PACK_TIMEOUT=${SCALE_PACK_TIMEOUT:-900}
while (($#)); do
  case $1 in
    --work) WORK=$2; shift ;;
    --files) FILES=$2; shift ;;
    --classes) CLASSES=$2; shift ;;
    --stat-paths) STAT_PATHS=$2; shift ;;
    --ext4-files) EXT4_FILES=$2; shift ;;
    --from-tree) FROM_TREE=1 ;;
    --keep-store) KEEP=1 ;;
    --reuse-store) REUSE=1; KEEP=1 ;;
    --render) RENDER=$2; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale_bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=$REPO/bench/results/scale
JSONL=$RESULTS/scale-$STAMP.jsonl
MD=$RESULTS/scale-$STAMP.md
LOG=$WORK/logs/scale-$STAMP.log
S=$WORK/scale
mkdir -p "$RESULTS" "$WORK/logs" "$S" || exit 1
: >"$JSONL"
# shellcheck source=bench/lib/lib.sh
source "$REPO/bench/lib/lib.sh"

render() {
  "$PY" - "$JSONL" "$WORK" "$REPO" "$DSFS" >"$MD" <<'PYEOF'
import json, os, statistics, sys
sys.path.insert(0, os.path.join(sys.argv[3], "bench", "lib"))
from report import machine_lines, fmt_rate, fmt_s
jsonl, work, repo, dsfs = sys.argv[1:5]
m, notes = {}, []
for l in open(jsonl):
    if l.strip():
        r = json.loads(l)
        m[(r["sys"], r["metric"])] = r["data"]
        if r.get("note"):
            notes.append(f"{r['sys']} {r['metric']}: {r['note']}")
g = lambda s, k: m.get((s, k))
cfg = g("_", "config") or {}
n = cfg.get("files", 0)
def rate(s, k, p):
    lines = g(s, k)
    if not isinstance(lines, list) or len(lines) < p:
        return "—"
    for l in lines:
        if l.get("errors"):
            notes.append(f"{s} {k}: {l['errors']} errors ({l.get('first_error', '')})")
    return fmt_rate(lines[p - 1]["files_per_s"])
mb = lambda kb: f"{kb / 1024:.1f} MB" if isinstance(kb, (int, float)) else "—"
out = [f"# dsfs at scale: {n:,} files, {os.path.basename(jsonl)[6:-6]}", ""]
out += machine_lines(work, repo)
out.append(f"- dsfs binary: {dsfs}" + (f" ({os.environ['DSFS_DESC']})" if os.environ.get("DSFS_DESC") else ""))
src = g("dsfs", "source") or "?"
out.append(f"- data set: `dsfs-gentar --files {n} --classes {cfg.get('classes')}` (bench/tools/gentar.cc): "
           f"{n:,} files of 100-600 bytes ({(g('_', 'file_bytes') or 0) / 1e6:,.0f} MB of file data) in "
           f"{cfg.get('classes')} class directories, partly compressible; packed from {src}")
out.append("")
out.append("| | dsfs | ext4 |")
out.append("|---|---|---|")
e4n = g("ext4", "files")
pk = g("dsfs", "pack_s")
out.append(f"| pack s (source: see above) | {fmt_s(pk) if pk else '—'} "
           f"({n / pk / 1000:.1f}k files/s) | — |" if pk else f"| pack s | — | — |")
sb = g("dsfs", "store_bytes")
out.append(f"| store size | {sb / 1e6:,.0f} MB ({sb / n:.0f} B/file) | — |" if sb else "| store size | — | — |")
ct = g("ext4", "create_s")
c1 = g("ext4", "create_1m_s")
out.append(f"| create the tree of empty files s | — | {fmt_s(c1) if c1 else '—'} (1M files)"
           + (f"; {fmt_s(ct)} ({e4n:,} files)" if ct and e4n != 1000000 else "") + " |")
du = g("ext4", "du_bytes")
if du:
    out.append(f"| ext4 tree on disk (`du`, {e4n:,} empty files) | — | {du / 1e6:,.0f} MB |")
out.append(f"| mount s (until `dsfs mount` returns) | {fmt_s(g('dsfs', 'mount_s')) or '—'} | — |")
am = g("dsfs", "rss_after_mount") or {}
out.append(f"| daemon VmRSS right after mount (RssAnon, RssFile) | {mb(am.get('rss_kb'))} "
           f"({mb(am.get('anon_kb'))}, {mb(am.get('file_kb'))}) | — |")
for t in (1, 4):
    e4 = f"{rate('ext4', f'stat_t{t}', 1)} / {rate('ext4', f'stat_t{t}', 2)}"
    out.append(f"| lstat of {cfg.get('stat_paths'):,} random paths, {t} thread{'s' if t > 1 else ''}, "
               f"files/s: after drop_caches / hot | {rate('dsfs', f'stat_t{t}', 1)} / "
               f"{rate('dsfs', f'stat_t{t}', 2)} | {e4} |")
for t in (1, 4):
    a = g("dsfs", f"rss_after_stat_t{t}") or {}
    out.append(f"| daemon VmRSS after the {t}-thread lstat runs (RssAnon, RssFile; peak VmHWM) | "
               f"{mb(a.get('rss_kb'))} ({mb(a.get('anon_kb'))}, {mb(a.get('file_kb'))}; {mb(a.get('hwm_kb'))}) | — |")
out.append("")
if e4n and e4n != n:
    out.append(f"**ext4 was compared at {e4n:,} files (the paths of a {e4n:,}-file set of the same layout), "
               f"not {n:,}**: creating the tree at 1M files took {c1:.0f} s; see the notes for why not at {n:,}.")
    out.append("")
elif e4n:
    out.append(f"ext4 was compared at the same {e4n:,} paths (empty files; creating 1M took {c1:.0f} s first).")
    out.append("")
info = g("dsfs", "info")
if isinstance(info, dict):
    out += [f"`dsfs info --json`: `{json.dumps(info)}`", ""]
if notes:
    out += ["Notes:", ""] + [f"- {x}" for x in notes] + [""]
out += ["Each lstat run: `sync; echo 3 > /proc/sys/vm/drop_caches`, a fresh mount (dsfs), then "
        "`dsfs-readbench ROOT --list PATHS --stat --threads T --passes 2` (pass 1 after drop_caches, pass 2 hot); "
        "the 1- and 4-thread runs use different random path lists (seeds 7 and 8).",
        "", f"Raw figures: `{os.path.basename(jsonl)}`; command: `bench/scale_bench.sh`.", ""]
print("\n".join(out))
PYEOF
}
if [[ -n $RENDER ]]; then
  rm -f "$JSONL" "$LOG"
  JSONL=$RENDER MD=${RENDER%.jsonl}.md
  render && cat "$MD"
  exit
fi
cleanup() {
  bench_cleanup
  local d
  for d in "$S/tree" "$S/ext4-1m" "$S/ext4"; do
    [[ -d $d ]] && { log "removing $d"; rm -rf "$d"; }
  done
  if [[ -f $S/store.dsfs ]] && ((!KEEP)) && (($(stat -c %s "$S/store.dsfs") >= 5 << 30)); then
    log "removing the store (5 GB or more)"
    rm -f "$S/store.dsfs"
  fi
  [[ -s $JSONL ]] && render && cat "$MD"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

build_readbench || exit 1
G=("$GENTAR" --files "$FILES" --classes "$CLASSES")
rec scale _ config "$(printf '{"files":%d,"classes":%d,"stat_paths":%d}' "$FILES" "$CLASSES" "$STAT_PATHS")"

STORE=$S/store.dsfs
[[ $REUSE == 1 && ! -f $STORE ]] && { log "no store $STORE to reuse"; exit 1; }
# Can this dsfs pack a tar from stdin?
if ((!FROM_TREE && !REUSE)); then
  "$GENTAR" --files 20 --classes 2 | timeout 60 "$DSFS" pack - "$S/probe.dsfs" --force >>"$LOG" 2>&1 ||
    { log "dsfs cannot pack a tar from stdin; packing a tree on disk instead"; FROM_TREE=1; }
  rm -f "$S/probe.dsfs"
fi

# 1. pack
if ((REUSE)); then
  rec scale dsfs source '"an existing store (--reuse-store: no pack figures in this run)"'
elif ((FROM_TREE)); then
  log "writing the tree ($FILES files) to $S/tree"
  t0=$EPOCHREALTIME
  "${G[@]}" --tree "$S/tree" || exit 1
  rec scale _ tree_write_s "$(elapsed "$t0" "$EPOCHREALTIME")"
  rec scale dsfs source '"a directory on ext4 (dsfs-gentar --tree)"'
  drop_caches
  log "dsfs pack $S/tree"
  t0=$EPOCHREALTIME
  timeout "$PACK_TIMEOUT" "$DSFS" pack "$S/tree" "$STORE" --force --quiet >>"$LOG" 2>&1
  rc=$?
else
  rec scale dsfs source '"a tar stream on stdin (dsfs-gentar | dsfs pack - STORE)"'
  log "dsfs-gentar | dsfs pack - $STORE"
  t0=$EPOCHREALTIME
  "${G[@]}" | timeout "$PACK_TIMEOUT" "$DSFS" pack - "$STORE" --force --quiet >>"$LOG" 2>&1
  rc=$?
fi
if ((!REUSE)); then
  if ((rc)); then
    rec scale dsfs pack_s null "dsfs pack failed or timed out (rc $rc, limit $PACK_TIMEOUT s)"
    exit 1
  fi
  rec scale dsfs pack_s "$(elapsed "$t0" "$EPOCHREALTIME")"
fi
rec scale dsfs store_bytes "$(stat -c %s "$STORE")"
out=$(timeout 120 "$DSFS" info "$STORE" --json 2>>"$LOG" | tr -d '\n')
[[ $out == \{* ]] && rec scale dsfs info "$out"
[[ $out =~ \"file_bytes\":\ *([0-9]+) ]] && rec scale _ file_bytes "${BASH_REMATCH[1]}"
rm -rf "$S/tree"

# 2. mount, RSS
mem() {
  printf '{"rss_kb":%s,"anon_kb":%s,"file_kb":%s,"hwm_kb":%s}' "$(proc_kb "$1" VmRSS)" \
    "$(proc_kb "$1" RssAnon)" "$(proc_kb "$1" RssFile)" "$(proc_kb "$1" VmHWM)"
}
M=$WORK/mnt/scale
drop_caches
mount_fs dsfs "$STORE" "$M" "${DSFS_MOUNT_OPTS:-}" || exit 1
rec scale dsfs mount_s "$MOUNT_S"
rec scale dsfs rss_after_mount "$(mem "$DAEMON_PID")"

# 3. lstat of random paths on dsfs
for t in 1 4; do
  "${G[@]}" --list "$STAT_PATHS" --list-seed $((t == 1 ? 7 : 8)) >"$S/paths_t$t"
done
for t in 1 4; do
  unmount "$M"
  drop_caches
  mount_fs dsfs "$STORE" "$M" "${DSFS_MOUNT_OPTS:-}" || exit 1
  log "dsfs: lstat, $t thread(s)"
  rec scale dsfs "stat_t$t" "$(rb "$M" --list "$S/paths_t$t" --stat --threads "$t" --passes 2 | jarray)"
  rec scale dsfs "rss_after_stat_t$t" "$(mem "$DAEMON_PID")"
done
unmount "$M"

# 4. ext4
if [[ $EXT4_FILES == 0 ]]; then
  rm -f "$S"/paths_t*
  log "done (ext4 skipped)"
  exit 0
fi
log "ext4: creating 1M empty files"
t0=$EPOCHREALTIME
"$GENTAR" --files 1000000 --classes "$CLASSES" --tree "$S/ext4-1m" --empty
c1=$(elapsed "$t0" "$EPOCHREALTIME")
rec scale ext4 create_1m_s "$c1"
if [[ $EXT4_FILES == auto ]]; then
  # the full tree when its creation should take under ~5 minutes
  if awk -v c="$c1" -v n="$FILES" 'BEGIN { exit !(c * n / 1e6 < 300) }'; then E4N=$FILES; else E4N=1000000; fi
else
  E4N=$EXT4_FILES
fi
if ((E4N == 1000000 && FILES != 1000000)); then
  E4=$S/ext4-1m
  GE=("$GENTAR" --files 1000000 --classes "$CLASSES")
else
  rm -rf "$S/ext4-1m"
  E4=$S/ext4
  GE=("$GENTAR" --files "$E4N" --classes "$CLASSES")
  if ((E4N != 1000000)); then
    log "ext4: creating $E4N empty files"
    t0=$EPOCHREALTIME
    "${GE[@]}" --tree "$E4" --empty
    rec scale ext4 create_s "$(elapsed "$t0" "$EPOCHREALTIME")"
  else
    "${GE[@]}" --tree "$E4" --empty
  fi
fi
rec scale ext4 files "$E4N"
rec scale ext4 du_bytes "$(du -sB1 "$E4" | cut -f1)"
for t in 1 4; do
  "${GE[@]}" --list "$STAT_PATHS" --list-seed $((t == 1 ? 7 : 8)) >"$S/ext4_paths_t$t"
  drop_caches
  log "ext4: lstat, $t thread(s)"
  rec scale ext4 "stat_t$t" "$(rb "$E4" --list "$S/ext4_paths_t$t" --stat --threads "$t" --passes 2 | jarray)"
done
rm -f "$S"/paths_t* "$S"/ext4_paths_t*
log "done"
