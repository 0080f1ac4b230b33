#!/usr/bin/env bash
# bench/kernel_cache_bench.sh: the page cache a -o kernel mount charges to a memory cgroup
# (issue 29 point 4). A tree of N small compressible files is packed, mounted with -o kernel
# from inside a fresh cgroup v1 memory cgroup, read whole once (cat, in the cgroup) after
# drop_caches, and the cgroup's charge is read: memory.usage_in_bytes, memory.stat cache, and
# the image server's reads and readahead. Root, cgroup v1 (memory controller).
#
#   bench/kernel_cache_bench.sh DSFS_BINARY LABEL [FILES] [EXTRA MOUNT OPTIONS...]
# One JSON line per run on stdout (and in bench/results/kernel/kernel-cache-DATE.jsonl).
set -euo pipefail
DSFS=$(realpath "$1"); LABEL=$2; N=${3:-10000}; shift 3 || true
OPTS=${*:-kernel}
WORK=${WORK:-/tmp/kcache-bench}
CGM=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
[[ -n $CGM ]] || { echo "no cgroup v1 memory controller" >&2; exit 2; }
mkdir -p "$WORK"
TREE=$WORK/tree-$N STORE=$WORK/tree-$N.dsfs MP=$WORK/mnt
if [[ ! -f $STORE ]]; then
  python3 - "$TREE" "$N" <<'PY'
import os, random, sys
out, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(29)
words = [''.join(rnd.choice('abcdefghij') for _ in range(rnd.randint(3, 9))) for _ in range(400)]
for i in range(n):
    d = os.path.join(out, f"d{i % 50:02d}")
    os.makedirs(d, exist_ok=True)
    size = rnd.randint(4000, 12000)
    text = ' '.join(rnd.choice(words) for _ in range(size // 6))[:size]
    with open(os.path.join(d, f"f{i:06d}.txt"), "w") as f:
        f.write(text)
PY
  "$DSFS" pack "$TREE" "$STORE" -q
fi
mkdir -p "$MP"
CG=$CGM/dsfs-kcache-$$
mkdir "$CG"
cleanup() {
  "$DSFS" umount "$MP" 2>/dev/null || true
  for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do echo "$p" >"$CGM/cgroup.procs" 2>/dev/null || true; done
  rmdir "$CG" 2>/dev/null || true
}
trap cleanup EXIT
LIMIT=${LIMIT:-$((4 << 30))}
echo "$LIMIT" >"$CG/memory.limit_in_bytes"
sync; echo 3 >/proc/sys/vm/drop_caches
IFS=, read -r -a o <<<"$OPTS"
args=(); for x in "${o[@]}"; do args+=(-o "$x"); done
sh -c "echo \$\$ > $CG/cgroup.procs && exec $DSFS mount ${args[*]} $STORE $MP"
sleep 1
stat_cache() { awk '$1 == "cache" { print $2 }' "$CG/memory.stat"; }
before_usage=$(cat "$CG/memory.usage_in_bytes"); before_cache=$(stat_cache)
t0=$(date +%s.%N)
sh -c "echo \$\$ > $CG/cgroup.procs && find $MP -type f -print0 | xargs -0 -n 200 cat > /dev/null"
t1=$(date +%s.%N)
sleep 2  # the readahead worker's last pieces
usage=$(cat "$CG/memory.usage_in_bytes"); cache=$(stat_cache)
t2=$(date +%s.%N)
sh -c "echo \$\$ > $CG/cgroup.procs && find $MP -type f -print0 | xargs -0 -n 200 cat > /dev/null"
t3=$(date +%s.%N)
bytes=$(du -sb --apparent-size "$TREE" | cut -f1)
stats=$("$DSFS" stats --json "$MP")
pid=$(cat "$CG/cgroup.procs" | head -1)
line=$(python3 - "$LABEL" "$OPTS" "$N" "$bytes" "$before_usage" "$before_cache" "$usage" "$cache" \
  "$t0" "$t1" "$t2" "$t3" "$stats" "$(uname -r)" "$(grep " $MP " /proc/self/mountinfo | head -1)" "$LIMIT" <<'PY'
import json, sys
a = sys.argv[1:]
st = json.loads(a[12]); k = st.get("kernel", {})
print(json.dumps({"label": a[0], "limit": int(a[15]), "options": a[1], "files": int(a[2]), "tree_bytes": int(a[3]),
  "usage_before": int(a[4]), "cache_before": int(a[5]), "usage_after_read": int(a[6]),
  "cache_after_read": int(a[7]), "cache_charged": int(a[7]) - int(a[5]),
  "cold_read_s": round(float(a[9]) - float(a[8]), 3), "warm_read_s": round(float(a[11]) - float(a[10]), 3),
  "image_reads": k.get("image_reads"), "image_bytes_read": k.get("image_bytes_read"),
  "readahead": k.get("readahead"), "kernel": a[13], "erofs_mount": a[14].split(" - ")[-1]}))
PY
)
echo "$line"
mkdir -p "$(dirname "$0")/results/kernel"
echo "$line" >>"$(dirname "$0")/results/kernel/kernel-cache-$(date +%Y%m%d).jsonl"
