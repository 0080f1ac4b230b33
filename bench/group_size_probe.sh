#!/bin/bash
# Issue 40: does a smaller solid group (format 4, the trained dictionary) make a miss cheaper
# at store+64M and 0.5x? One bench/kernel_probe.py run per (limit, group size, mount), 3 passes,
# the same limit in MiB for every store, under /work/bench.lock.
#   bench/group_size_probe.sh DSFS TREE OUTDIR "LIMITS_MIB" "GROUPS" [READBENCH]
# GROUPS: pack --group-size values (e.g. "128K 32K 16K"); stores are packed into OUTDIR once.
set -euo pipefail
dsfs=$1 tree=$2 out=$3 limits=$4 groups=$5 rb=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
list=$out/files.list
[ -s "$list" ] || find "$tree" -type f -printf '%P\n' | sort > "$list"
for g in $groups; do
  [ -s "$out/g$g.dsfs" ] || "$dsfs" pack -q -f --group-size "$g" "$tree" "$out/g$g.dsfs"
  ls -l "$out/g$g.dsfs"
done
for lim in $limits; do
  for g in $groups; do
    for opts in "" kernel; do
      flock /work/bench.lock /usr/bin/python3 "$here/kernel_probe.py" --dsfs "$dsfs" \
        --store "$out/g$g.dsfs" --list "$list" --limit-mb "$lim" --opts "$opts" --passes 3 \
        --label "g$g ${opts:-classic} ${lim}MiB" ${rb:+--readbench "$rb"} | tee -a "$out/probe.jsonl"
    done
  done
done
