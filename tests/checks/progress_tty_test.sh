#!/usr/bin/env bash
# The progress of dsfs pack, add, convert, verify and extract (tools/progress.h) as a user sees it: on a
# terminal (a pty from util-linux's script) a line redrawn in place with the rate and the time
# left, then the summary; elsewhere the summary line alone and nothing on stderr; with -q nothing.
# Usage: progress_tty_test.sh DSFS_BINARY
set -euo pipefail
dsfs=$1
command -v script >/dev/null || { echo "SKIPPED: script (util-linux) is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/a" "$tmp/more"
for i in $(seq 1 200); do printf 'file %s %0512d\n' "$i" "$i" >"$tmp/src/a/$i.txt"; done
echo more >"$tmp/more/x.txt"
fail=0
check() {  # check NAME FILE PATTERN: FILE holds PATTERN (an extended regex)
  if grep -Eq -- "$3" "$2"; then echo "ok: $1"; else
    echo "FAILED: $1: no /$3/ in:"; cat -A "$2"; fail=1; fi
}
# On a terminal: stderr and stdout both go to the pty.
on_tty() { script -q -e -c "$1" /dev/null </dev/null >"$2" 2>&1; }
on_tty "'$dsfs' pack '$tmp/src' '$tmp/s.db'" "$tmp/pack.tty"
check "pack on a tty: a redrawn line" "$tmp/pack.tty" $'\r(training|compressing|finishing) [0-9]+/200 files'
check "pack on a tty: the time left" "$tmp/pack.tty" ' left'$'\033''\[K'
check "pack on a tty: the summary" "$tmp/pack.tty" 'packed 200 files, .* files/s'
on_tty "'$dsfs' add '$tmp/s.db' '$tmp/more'" "$tmp/add.tty"
check "add on a tty: a redrawn line with the time left" "$tmp/add.tty" $'\r''[a-z ]+ [0-9]+/1 files.* left'
check "add on a tty: the summary" "$tmp/add.tty" 'added 1 files, .* files/s'
on_tty "'$dsfs' convert '$tmp/s.db' '$tmp/r.db' --backend rocksdb" "$tmp/convert.tty"
check "convert on a tty: a redrawn line with the time left" "$tmp/convert.tty" $'\r''(copying|finishing) .* left'
check "convert on a tty: the summary" "$tmp/convert.tty" 'converted .* records, .* in [0-9.]+ s, .*/s'
on_tty "'$dsfs' verify '$tmp/s.db'" "$tmp/verify.tty"
check "verify on a tty: a redrawn line" "$tmp/verify.tty" $'\r''verifying [0-9]+/201 files.* left'
check "verify on a tty: the summary" "$tmp/verify.tty" 'verified 201 files .*: all OK'
on_tty "'$dsfs' extract '$tmp/s.db' '$tmp/x'" "$tmp/extract.tty"
check "extract on a tty: a redrawn line" "$tmp/extract.tty" $'\r''extracting [0-9]+/201 files'
check "extract on a tty: the summary" "$tmp/extract.tty" 'extracted 201 files .* into '
# -q (of the command or of dsfs, before or after the command) on a terminal: nothing at all.
for cmd in "pack -q -f '$tmp/src' '$tmp/s.db'" "-q pack -f '$tmp/src' '$tmp/s.db'" \
           "pack -f '$tmp/src' '$tmp/s.db' --quiet" "add -q '$tmp/s.db' '$tmp/more'" \
           "convert -q -f '$tmp/s.db' '$tmp/r.db' --backend rocksdb" "verify -q '$tmp/s.db'" \
           "-q verify '$tmp/s.db'" "extract -q '$tmp/s.db' '$tmp/xq'"; do
  on_tty "'$dsfs' $cmd" "$tmp/quiet.tty"
  if [[ -s $tmp/quiet.tty ]]; then echo "FAILED: dsfs $cmd printed:"; cat -A "$tmp/quiet.tty"; fail=1
  else echo "ok: dsfs $cmd on a tty: nothing printed"; fi
  [[ $cmd != add* ]] || "$dsfs" pack -q -f "$tmp/src" "$tmp/s.db"  # the next add adds again
done
# Not a terminal: one summary line on stdout, nothing on stderr.
"$dsfs" pack -f "$tmp/src" "$tmp/s.db" >"$tmp/pack.out" 2>"$tmp/pack.err"
"$dsfs" convert -f "$tmp/s.db" "$tmp/r.db" --backend rocksdb >"$tmp/convert.out" 2>"$tmp/convert.err"
for c in pack convert; do
  if [[ -s $tmp/$c.err || $(wc -l <"$tmp/$c.out") != 1 ]]; then
    echo "FAILED: $c without a tty: stderr must be empty, stdout one line"; cat -A "$tmp/$c.out" "$tmp/$c.err"
    fail=1
  else echo "ok: $c without a tty: one summary line: $(cat "$tmp/$c.out")"; fi
done
exit $fail
