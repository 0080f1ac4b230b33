#!/usr/bin/env bash
# Bash completion (completion/dsfs) as a user's shell loads it: `complete -p dsfs` names its
# function, and what it offers is what the binary has: every subcommand of `dsfs --help`, every
# flag of each subcommand's --help, every mount option of `dsfs mount --help`, and every `-o`
# option docs/usage.md documents (so the docs name no option the binary lacks).
# Usage: completion_test.sh DSFS_BINARY SOURCE_DIR
set -euo pipefail
dsfs=$1
src=$2
fail=0
offered() {  # offered WORD...: the completions for the command line "dsfs WORD..." (cursor last)
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _dsfs
           printf "%s\n" "${COMPREPLY[@]}"' sh "$src/completion/dsfs" "$dsfs" "$@"
}
expect() {  # expect WHAT WORD OFFERED: WORD is among OFFERED (one per line)
  if grep -qxF -- "$2" <<<"$3"; then :; else echo "FAILED: $1: '$2' not offered"; fail=1; fi
}
spec=$(bash -c 'source "$1"; complete -p dsfs' sh "$src/completion/dsfs")
[[ $spec == *"-F _dsfs dsfs" ]] || { echo "FAILED: complete -p dsfs: $spec"; fail=1; }

cmds=$("$dsfs" --help | sed -n '/^Subcommands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
[[ $(wc -l <<<"$cmds") -ge 10 ]] || { echo "FAILED: too few subcommands in --help: $cmds"; exit 1; }
top=$(offered "")
for c in $cmds; do expect "dsfs <TAB>" "$c" "$top"; done
[[ $(offered pa) == pack ]] || { echo "FAILED: dsfs pa<TAB>: $(offered pa)"; fail=1; }
for c in $cmds; do
  flags=$(offered "$c" -)
  for f in $("$dsfs" "$c" --help | grep -oE '^  -[^ ]+' | tr ',' '\n' | sed 's/^ *//'); do
    expect "dsfs $c -<TAB>" "$f" "$flags"
  done
done
expect "dsfs --log-level <TAB>" debug "$(offered --log-level "")"
expect "after a global flag" mount "$(offered -v "")"
top_flags=$(offered -)
for f in $("$dsfs" --help | sed -n '/^Options:/,/^$/p' | grep -oE '^  -[^ ]+' | tr ',' '\n' | sed 's/^ *//'); do
  expect "dsfs -<TAB>" "$f" "$top_flags"
done
expect "dsfs help <TAB>" mount "$(offered help "")"
expect "dsfs help cache <TAB>" gc "$(offered help cache "")"

opts=$(offered mount -o "")
for o in $("$dsfs" mount --help | sed -n '/^Mount options/,/^[^ ]/p' | grep -oE '^  [a-z0-9_]+'); do
  if ! grep -qE "^$o=?\$" <<<"$opts"; then echo "FAILED: -o <TAB>: '$o' not offered"; fail=1; fi
done
for o in $(grep -oE '^  -o [a-z0-9_]+' "$src/docs/usage.md" | sed 's/^  -o //' | sort -u); do
  if ! grep -qE "^$o=?\$" <<<"$opts"; then
    echo "FAILED: docs/usage.md documents -o $o, which dsfs mount --help lacks"; fail=1
  fi
done
expect "-o after a comma" "ro,cache_size=" "$(offered mount -o ro,cache_s)"
expect "--backend <TAB>" rocksdb "$(offered convert --backend "")"
[[ $fail == 0 ]] && echo "ok: $(wc -l <<<"$opts") mount options, $(wc -w <<<"$cmds") subcommands"
exit $fail
