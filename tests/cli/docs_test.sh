#!/usr/bin/env bash
# The documentation a user reads agrees with the command: every command of
# `offload-lock --help` and every option of `offload-lock COMMAND --help` is
# in the man page and offered by the bash completion; the man page renders
# without warnings.
#   docs_test.sh OFFLOAD_LOCK SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
man=$src/doc/offload-lock.1 completion=$src/doc/offload-lock.bash-completion
failed=0 passed=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}" >/dev/null 2>&1; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}
complete_words() {  # the completions offered after the given words
  bash -c 'source "$1"; shift; COMP_WORDS=("$@" ""); COMP_CWORD=$#; _offload_lock; printf "%s\n" "${COMPREPLY[@]}"' _ "$completion" "$@"
}

warnings=$(groff -man -Tutf8 -ww -z "$man" 2>&1)
plain=$(sed 's/\\-/-/g' "$man")  # roff writes a hyphen-minus as \-
check "man page renders without warnings: $warnings" test -z "$warnings"

commands=$("$bin" --help | awk '/^commands:/{on=1; next} on && /^  [a-z]/{print $1} on && /^$/{exit}')
check "--help lists the seven commands" test "$(echo "$commands" | wc -l)" -eq 7
top=$(complete_words offload-lock)
for c in $commands; do
  check "man page documents '$c'" grep -qE "^\.BR? $c( |$)" <<<"$plain"
  check "completion offers '$c'" grep -qx -- "$c" <<<"$top"
  offered=$(complete_words offload-lock "$c")
  for opt in $("$bin" "$c" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    check "man page documents '$c $opt'" grep -q -- "$opt" <<<"$plain"
    check "completion offers '$c $opt'" grep -qx -- "$opt" <<<"$offered"
  done
done
echo "docs: $passed passed, $failed failed"
test "$failed" -eq 0
