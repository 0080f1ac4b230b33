#!/usr/bin/env bash
# bench/cache_budget_bench.sh: does the daemon hold its RAM cache budget (-o cache_size)?
#
#   bench/cache_budget_bench.sh [--work DIR] [--threads N] [--cases "rand64k:64M seq1g:100M ..."]
#
# Per case DATASET:BUDGET (default rand64k:64M seq1g:32M seq1g:100M seq1g:200M, so that the
# overhead can be told apart from the budget): the store is 3-20x larger than the budget
# (rand64k: 11,000 files of 64 KiB random bytes, 721 MB; seq1g: one 1 GiB file of concatenated
# JPEGs/PNGs). It is mounted
# with -o cache_size=BUDGET,push=0 and read whole (rand64k: shuffled, N threads, default 4;
# seq1g: sequentially), twice, with drop_caches between the passes so that the second pass
# goes through the daemon again. A sampler reads the daemon's /proc/PID/status every 0.2 s:
# VmRSS, RssAnon (heap: the cache lives here) and RssFile (pages of the memory-mapped store,
# which are the kernel's reclaimable page cache). Reports peak RSS against the budget and the
# overhead above it, and the RSS right after mount. Writes
# bench/results/cache-budget/cache-budget-<date>.md.
# Environment: DSFS (default build/dsfs), DSFS_DESC (how it was built, for the report), BENCH_WORK.
set -uo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${BENCH_WORK:-/var/tmp/dsfs-bench}
DSFS=${DSFS:-$REPO/build/dsfs}
THREADS=4
CASES="rand64k:64M seq1g:32M seq1g:100M seq1g:200M"
while (($#)); do
  case $1 in
    --work) WORK=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --cases) CASES=$2; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cache_budget_bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=$REPO/bench/results/cache-budget
JSONL=$RESULTS/cache-budget-$STAMP.jsonl
MD=$RESULTS/cache-budget-$STAMP.md
LOG=$WORK/logs/cache-budget-$STAMP.log
mkdir -p "$RESULTS" "$WORK/logs" "$WORK/mnt" || exit 1
: >"$JSONL"
# shellcheck source=bench/lib/lib.sh
source "$REPO/bench/lib/lib.sh"

render() {
  "$PY" - "$JSONL" "$WORK" "$REPO" "$DSFS" "$THREADS" >"$MD" <<'PYEOF'
import json, os, sys
sys.path.insert(0, os.path.join(sys.argv[3], "bench", "lib"))
from report import machine_lines
jsonl, work, repo, dsfs, threads = sys.argv[1:6]
by = {}
for l in open(jsonl):
    if l.strip():
        r = json.loads(l)
        by.setdefault(r["ds"], {})[r["metric"]] = r["data"]
mb = lambda kb: f"{kb / 1024:.1f}"
out = [f"# dsfs cache budget, {os.path.basename(jsonl)[13:-6]}", ""]
out += machine_lines(work, repo)
out.append(f"- dsfs binary: {dsfs}" + (f" ({os.environ['DSFS_DESC']})" if os.environ.get("DSFS_DESC") else ""))
out.append(f"- mount `-o cache_size=BUDGET,push=0`; two full reads (rand64k: shuffled, {threads} threads; "
           "seq1g: sequential, 1 MiB reads) with `drop_caches` between them; the daemon's "
           "/proc/PID/status sampled every 0.2 s")
out.append("")
out.append("| case (data set:budget) | store MB | budget MB | RSS after mount MB (anon) | peak VmRSS MB | peak RssAnon MB | peak RssFile MB | RssAnon overhead above budget MB | held? (RssAnon <= budget + 64 MB) | cache bytes at end MB (evictions) | read MB/s pass 1 / pass 2 | samples |")
out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
for ds, m in by.items():
    s = m.get("samples") or []
    if not s:
        out.append(f"| {ds} | — | — | no samples |" + " |" * 8)
        continue
    budget = m["budget_bytes"] / 2**20
    pa = max(x[1] for x in s); pr = max(x[0] for x in s); pf = max(x[2] for x in s)
    base = m.get("after_mount") or {}
    st = m.get("stats_end") or {}
    cache = st.get("cache", {})
    over = pa / 1024 - budget
    rates = []
    for k in ("pass1", "pass2"):
        lines = m.get(k)
        rates.append(f"{lines[0]['mb_per_s']:.0f}" if isinstance(lines, list) and lines else "—")
    out.append(f"| {ds} | {m['store_bytes'] / 1e6:.0f} | {budget:.0f} | {mb(base.get('rss_kb', 0))} ({mb(base.get('anon_kb', 0))}) "
               f"| {mb(pr)} | {mb(pa)} | {mb(pf)} | {over:.1f} | {'yes' if over <= 64 else '**no**'} "
               f"| {cache.get('bytes', 0) / 2**20:.1f} ({cache.get('evictions', '?')}) | {' / '.join(rates)} | {len(s)} |")
out += ["", "Payloads that zstd cannot shrink are stored raw and served from the memory map without "
        "entering the RAM cache (see the cache column), so only the compressible seq1g exercises the budget.",
        "", "RssFile is the part of the memory-mapped LMDB store the daemon has touched: file pages the "
        "kernel shares with its page cache and reclaims under pressure, not memory the daemon "
        "allocates; the cache budget is about RssAnon.", "",
        "Raw figures (every sample): `" + os.path.basename(jsonl) + "`; command: `bench/cache_budget_bench.sh`.", ""]
print("\n".join(out))
PYEOF
}
SAMPLER=
cleanup() {
  [[ -n $SAMPLER ]] && kill "$SAMPLER" 2>/dev/null && wait "$SAMPLER" 2>/dev/null
  bench_cleanup
  [[ -s $JSONL ]] && render && cat "$MD"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

build_readbench || exit 1

# sample PID FILE: "rss anon file" kB lines every 0.2 s until the process ends or we are killed
sample() {
  local pid=$1 k v _ rss anon file
  while [[ -r /proc/$pid/status ]]; do
    rss=0 anon=0 file=0
    while read -r k v _; do
      case $k in VmRSS:) rss=$v ;; RssAnon:) anon=$v ;; RssFile:) file=$v ;; esac
    done <"/proc/$pid/status" 2>/dev/null
    echo "$rss $anon $file"
    sleep 0.2
  done
}

for c in $CASES; do
  ds=${c%%:*}
  budget=${c#*:}
  src=$WORK/$ds
  case $ds in
    rand64k) "$PY" "$REPO/bench/lib/datasets.py" random-files "$src" --count 11000 --file-size 64K >>"$LOG" 2>&1 ;;
    seq1g) [[ -d $src ]] || "$PY" "$REPO/bench/lib/datasets.py" blob "$src" --from "$WORK/photo32" --from "$WORK/fmnist" --size 1G >>"$LOG" 2>&1 ;;
  esac
  store=$WORK/$ds.dsfs
  if [[ ! -f $store || $store -ot $src ]]; then
    log "$ds: dsfs pack"
    "$DSFS" pack "$src" "$store" --force >>"$LOG" 2>&1 || { log "$ds: pack failed"; continue; }
  fi
  list=$WORK/$ds.list
  [[ -f $list ]] || rb "$src" --write-list "$list"
  rec "$c" dsfs store_bytes "$(stat -c %s "$store")"
  rec "$c" dsfs budget "\"$budget\""
  rec "$c" dsfs budget_bytes "$(numfmt --from=iec "$budget")"
  m=$WORK/mnt/budget-$ds
  drop_caches
  mount_fs dsfs "$store" "$m" "cache_size=$budget,push=0" "$c" budget || continue
  pid=$DAEMON_PID
  rec "$c" dsfs after_mount "$(printf '{"rss_kb":%s,"anon_kb":%s}' "$(proc_kb "$pid" VmRSS)" "$(proc_kb "$pid" RssAnon)")"
  samples=$WORK/logs/cache-budget-$STAMP-$ds-$budget.samples
  sample "$pid" >"$samples" &
  SAMPLER=$!
  for p in 1 2; do
    log "$ds: pass $p"
    if [[ $ds == seq1g ]]; then
      out=$(rb --seq "$m/$(head -1 "$list")" --passes 1)
    else
      out=$(rb "$m" --list "$list" --threads "$THREADS" --passes 1)
    fi
    rec "$c" dsfs "pass$p" "$(jarray <<<"$out")"
    drop_caches
  done
  sleep 0.5
  kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null; SAMPLER=
  rec "$c" dsfs stats_end "$(timeout 10 cat "$m/.dsfs/stats" | tr -d '\n')"
  rec "$c" dsfs samples "[$(awk '{ printf "%s[%s,%s,%s]", (NR > 1 ? "," : ""), $1, $2, $3 }' "$samples")]"
  unmount "$m"
done
log "done"
