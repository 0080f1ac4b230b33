#!/usr/bin/env bash
# bench/fuse_options_bench.sh: what each kernel-facing mount option of dsfs is worth (photo32).
#
#   bench/fuse_options_bench.sh [--work DIR] [--limit N] [--passes N] [--configs "OPTS OPTS ..."]
#
# For each configuration the photo32 store (WORK/photo32.dsfs, made by bench/core_bench.sh; packed
# here when missing) is mounted with those -o options, then shuffled open+read+close of the same
# LIMIT files (default 50,000 of the 150,000) with 1 and 2 threads:
#   hot: one warm pass, then the median of PASSES passes (default 3);
#   first touch: unmount, drop_caches, mount, `find` over the tree, one pass.
# The daemon's request counters (/.dsfs/stats) before and after the hot passes give requests
# per file. Configurations (default): defaults; zero_open=0; zero_open=0,timeout=1; push=0;
# threads=1; threads=4 ("defaults" = no -o). Writes
# bench/results/fuse-options/fuse-options-<date>.md (and .jsonl).
# Environment: DSFS (default build/dsfs), DSFS_DESC (how it was built, for the report), BENCH_WORK.
set -uo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${BENCH_WORK:-/var/tmp/dsfs-bench}
DSFS=${DSFS:-$REPO/build/dsfs}
LIMIT=50000
PASSES=3
CONFIGS="defaults zero_open=0 zero_open=0,timeout=1 push=0 threads=1 threads=4"
while (($#)); do
  case $1 in
    --work) WORK=$2; shift ;;
    --limit) LIMIT=$2; shift ;;
    --passes) PASSES=$2; shift ;;
    --configs) CONFIGS=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuse_options_bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=$REPO/bench/results/fuse-options
JSONL=$RESULTS/fuse-options-$STAMP.jsonl
MD=$RESULTS/fuse-options-$STAMP.md
LOG=$WORK/logs/fuse-options-$STAMP.log
mkdir -p "$RESULTS" "$WORK/logs" "$WORK/mnt" || exit 1
: >"$JSONL"
# shellcheck source=bench/lib/lib.sh
source "$REPO/bench/lib/lib.sh"

render() {
  "$PY" - "$JSONL" "$WORK" "$REPO" "$LIMIT" "$PASSES" "$DSFS" >"$MD" <<'PYEOF'
import json, os, statistics, sys
sys.path.insert(0, os.path.join(sys.argv[3], "bench", "lib"))
from report import machine_lines, fmt_rate
jsonl, work, repo, limit, passes, dsfs = sys.argv[1:7]
recs = [json.loads(l) for l in open(jsonl) if l.strip()]
by = {}
for r in recs:
    by.setdefault(r["sys"], {})[r["metric"]] = r["data"]
def rate(lines, hot):
    if not isinstance(lines, list) or not lines:
        return None
    v = [l["files_per_s"] for l in lines]
    return statistics.median(v) if hot else v[0]
def reqs(cfg, t):
    a, b, lines = by[cfg].get(f"stats_before_t{t}"), by[cfg].get(f"stats_after_t{t}"), by[cfg].get(f"hot_t{t}")
    if not (isinstance(a, dict) and isinstance(b, dict) and isinstance(lines, list)):
        return None
    files = sum(l["files"] for l in lines)
    d = {k: b["requests"][k] - a["requests"][k] for k in b["requests"]}
    total = sum(d.values())
    main = ", ".join(f"{k} {v / files:.2f}" for k, v in d.items() if v / files >= 0.005)
    return f"{total / files:.3f}" + (f" ({main})" if main else "")
out = [f"# dsfs FUSE options, photo32, {os.path.basename(jsonl)[13:-6]}", ""]
out += machine_lines(work, repo)
out.append(f"- dsfs binary: {dsfs}" + (f" ({os.environ['DSFS_DESC']})" if os.environ.get("DSFS_DESC") else ""))
out.append(f"- shuffled open+read+close of the same {int(limit):,} photo32 files (seed 42); hot = median "
           f"of {passes} passes after a warm one; first touch = unmount, `sync; echo 3 > drop_caches`, "
           "mount, `find` over the whole tree (150,000 files), one pass")
out.append("")
out.append("| -o options | hot, 1 thread | hot, 2 threads | first touch + find, 1 thread | first touch + find, 2 threads | requests per file, hot passes, 1 thread | requests per file, hot passes, 2 threads | find s (cold) | mount s |")
out.append("|---|---|---|---|---|---|---|---|---|")
for cfg, m in by.items():
    if cfg == "_":
        continue
    cells = [f"`{m.get('opts') or '(defaults)'}`"]
    for key, hot in (("hot_t1", True), ("hot_t2", True), ("first_t1", False), ("first_t2", False)):
        v = rate(m.get(key), hot)
        cells.append(fmt_rate(v) if v else "—")
    cells += [reqs(cfg, 1) or "—", reqs(cfg, 2) or "—"]
    f = [x for x in (m.get("find_s_t1"), m.get("find_s_t2")) if isinstance(x, (int, float))]
    cells.append(f"{statistics.median(f):.3f}" if f else "—")
    cells.append(f"{m['mount_s']:.3f}" if isinstance(m.get("mount_s"), (int, float)) else "—")
    out.append("| " + " | ".join(cells) + " |")
errs = [f"{r['sys']} {r['metric']}: {r['note']}" for r in recs if r.get("note")]
errs += [f"{r['sys']} {r['metric']}: {l['errors']} errors ({l.get('first_error', '')})"
         for r in recs if isinstance(r["data"], list) for l in r["data"] if l.get("errors")]
if errs:
    out += ["", "Notes:", ""] + [f"- {e}" for e in errs]
out += ["", "Raw figures: `" + os.path.basename(jsonl) + "`; command: `bench/fuse_options_bench.sh`.", ""]
print("\n".join(out))
PYEOF
}
cleanup() { bench_cleanup; [[ -s $JSONL ]] && render && cat "$MD"; }
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

build_readbench || exit 1
SRC=$WORK/photo32
STORE=$WORK/photo32.dsfs
LIST=$WORK/photo32.list
[[ -d $SRC ]] || "$PY" "$REPO/bench/lib/datasets.py" photo-crops "$SRC" >>"$LOG" 2>&1 || exit 1
[[ -f $LIST ]] || rb "$SRC" --write-list "$LIST" || exit 1
[[ -f $STORE ]] || "$DSFS" pack "$SRC" "$STORE" --force >>"$LOG" 2>&1 || exit 1
M=$WORK/mnt/options-photo32
stats() { timeout 10 cat "$M/.dsfs/stats" 2>/dev/null | tr -d '\n'; }

for c in $CONFIGS; do
  name=$c
  mopts=$c
  [[ $c == defaults ]] && mopts=
  log "== $name: -o '$mopts'"
  rec _ "$name" opts "\"$mopts\""
  cat "$STORE" >/dev/null
  mount_fs dsfs "$STORE" "$M" "$mopts" || { rec _ "$name" mount_s null "mount failed"; continue; }
  rec _ "$name" mount_s "$MOUNT_S"
  for t in 1 2; do
    rb "$M" --list "$LIST" --limit "$LIMIT" --threads "$t" --passes 1 >/dev/null
    rec _ "$name" "stats_before_t$t" "$(stats)"
    out=$(rb "$M" --list "$LIST" --limit "$LIMIT" --threads "$t" --passes "$PASSES" --label "$name hot")
    rec _ "$name" "stats_after_t$t" "$(stats)"
    rec _ "$name" "hot_t$t" "$(jarray <<<"$out")"
  done
  for t in 1 2; do
    unmount "$M"
    drop_caches
    mount_fs dsfs "$STORE" "$M" "$mopts" || { rec _ "$name" "first_t$t" null "remount failed"; continue; }
    t0=$EPOCHREALTIME
    find "$M" >/dev/null
    rec _ "$name" "find_s_t$t" "$(elapsed "$t0" "$EPOCHREALTIME")"
    out=$(rb "$M" --list "$LIST" --limit "$LIMIT" --threads "$t" --passes 1 --label "$name first")
    rec _ "$name" "first_t$t" "$(jarray <<<"$out")"
    rec _ "$name" "stats_first_t$t" "$(stats)"
  done
  unmount "$M"
done
log "done"
