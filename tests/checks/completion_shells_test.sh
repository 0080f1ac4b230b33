#!/usr/bin/env bash
# The zsh (completion/_dsfs) and fish (completion/dsfs.fish) completions, beside bash's and read
# from the same source (dsfs's own --help): each offers every subcommand of `dsfs --help` and
# every flag of each subcommand's --help, and the mount options after -o. A shell that is not
# installed is skipped (saying so); exit 77 if neither is.
# Usage: completion_shells_test.sh DSFS_BINARY SOURCE_DIR
set -uo pipefail
dsfs=$1
src=$2
fail=0
ran=0
zsh_offered() {  # zsh_offered WORD...: the candidates for "dsfs WORD..." (cursor on the last)
  DSFS_COMPLETION_DEFINE_ONLY=1 zsh -fc 'source "$1"; shift; words=("$@"); CURRENT=$#
    _dsfs_words' sh "$src/completion/_dsfs" "$dsfs" "$@"
}
fish_offered() {
  local line="$dsfs" w
  for w in "$@"; do line+=" $w"; done
  fish --no-config -c 'source $argv[1]; complete -C $argv[2]' "$src/completion/dsfs.fish" "$line" |
    cut -f1
}
expect() {  # expect SHELL WHAT WORD OFFERED
  grep -qxF -- "$3" <<<"$4" || { echo "FAILED: $1: $2: '$3' not offered"; fail=1; }
}
cmds=$("$dsfs" --help | sed -n '/^Subcommands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
[[ $(wc -l <<<"$cmds") -ge 10 ]] || { echo "FAILED: too few subcommands in --help: $cmds"; exit 1; }
for sh in zsh fish; do
  if ! command -v "$sh" >/dev/null; then echo "skipped: $sh is not installed"; continue; fi
  ran=1
  top=$("${sh}_offered" "")
  for c in $cmds; do expect "$sh" "dsfs <TAB>" "$c" "$top"; done
  for c in $cmds; do
    flags=$("${sh}_offered" "$c" -)
    for f in $("$dsfs" "$c" --help | grep -oE '^  -[^ ]+' | tr ',' '\n' | sed 's/^ *//'); do
      expect "$sh" "dsfs $c -<TAB>" "$f" "$flags"
    done
  done
  opts=$("${sh}_offered" mount -o "")
  for o in $("$dsfs" mount --help | sed -n '/^Mount options/,/^[^ ]/p' | grep -oE '^  [a-z0-9_]+'); do
    grep -qE "^$o=?\$" <<<"$opts" || { echo "FAILED: $sh: -o <TAB>: '$o' not offered"; fail=1; }
  done
  expect "$sh" "dsfs cache <TAB>" gc "$("${sh}_offered" cache "")"
  expect "$sh" "dsfs help <TAB>" extract "$("${sh}_offered" help "")"
  expect "$sh" "--view <TAB>" bmp "$("${sh}_offered" extract --view "")"
  [[ $fail == 0 ]] && echo "ok: $sh: $(wc -w <<<"$cmds") subcommands, $(wc -l <<<"$opts") mount options"
done
((ran)) || exit 77
exit $fail
