#!/usr/bin/env bash
# The documentation a user reads agrees with the command: every command of
# `offload-lock --help` and every option of `offload-lock COMMAND --help` is
# in the man page and offered by the bash completion; each command's
# synopsis is the same in its --help, `offload-lock help COMMAND`, the
# top-level help and README.md; the short options are documented
# everywhere; the completion completes after `run --` and file names for
# --lock; the man page renders without warnings.
#   docs_test.sh OFFLOAD_LOCK SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
man=$src/doc/offload-lock.1 completion=$src/doc/offload-lock.bash-completion readme=$src/README.md
failed=0 passed=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}" >/dev/null 2>&1; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}
complete_words() {  # the completions offered after the given words (the last one being completed)
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _offload_lock; printf "%s\n" "${COMPREPLY[@]}"' _ "$completion" "$@"
}
squeeze() { tr -s ' \n' ' '; }
synopsis() {  # a command's synopsis from its --help, without "offload-lock ", on one line
  "$bin" "$1" --help | awk 'NR > 1 && /^  [^ ]/ {exit} {print}' | sed 's/^offload-lock //' | squeeze
}

warnings=$(groff -man -Tutf8 -ww -z "$man" 2>&1)
plain=$(sed 's/\\-/-/g; s/\\f[BIRP]//g' "$man")  # roff writes a hyphen-minus as \-
check "man page renders without warnings: $warnings" test -z "$warnings"

commands=$("$bin" --help | awk '/^commands:/{on=1; next} on && /^  [a-z]/{print $2 == "" ? $1 : $1} on && /^$/{exit}' | awk '{print $1}')
top=$(complete_words offload-lock "")
check "--help lists at least the eight commands" test "$(echo "$commands" | wc -l)" -ge 8
check "completion offers exactly the commands of --help" \
  test "$(echo "$commands" | sort)" = "$(grep -v '^-' <<<"$top" | sort)"
check "help and --help print the same overview" test "$("$bin" help)" = "$("$bin" --help)"
readme_text=$(squeeze <"$readme")
top_text=$("$bin" --help | squeeze)
for c in $commands; do
  check "man page documents '$c'" grep -qE "^\.BR? $c( |$)" <<<"$plain"
  check "completion offers '$c'" grep -qx -- "$c" <<<"$top"
  check "help $c and $c --help print the same text" test "$("$bin" help "$c")" = "$("$bin" "$c" --help)"
  syn=$(synopsis "$c")
  check "the top-level help has $c's synopsis: $syn" grep -qF -- "$syn" <<<"$top_text"
  check "README has $c's synopsis: $syn" grep -qF -- "$syn" <<<"$readme_text"
  offered=$(complete_words offload-lock "$c" "")
  for opt in $("$bin" "$c" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    check "man page documents '$c $opt'" grep -q -- "$opt" <<<"$plain"
    check "completion offers '$c $opt'" grep -qx -- "$opt" <<<"$offered"
  done
done
for short in -w -l -j -q -h; do
  check "--help documents $short" grep -qE -- "(^|[ [])$short[ ,|]" <<<"$("$bin" --help)"
  check "man page documents $short" grep -qE -- "(^|[ [])$short([ ,|]|$)" <<<"$plain"
  check "README documents $short" grep -qE -- "(^|[ [\`])$short[ ,|\`]" "$readme"
done

# Completion after `run --` and of paths.
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
touch "$tmp/some-file" && mkdir "$tmp/some-dir"
check "run -- completes a command" grep -qx echo <<<"$(complete_words offload-lock run -- ec)"
check "run --gpus 2 -- completes a command" grep -qx echo <<<"$(complete_words offload-lock run --gpus 2 -- ec)"
check "run -- CMD completes CMD's arguments (files)" grep -qx "$tmp/some-file" <<<"$(complete_words offload-lock run -- cat "$tmp/some-f")"
check "run's options are not offered after --" test -z "$(complete_words offload-lock run -- cat --wa)"
check "--lock completes files" grep -qx "$tmp/some-file" <<<"$(complete_words offload-lock --lock "$tmp/some-f")"
check "--lock completes directories" grep -qx "$tmp/some-dir" <<<"$(complete_words offload-lock --lock "$tmp/some-d")"
check "--lock=PATH completes (split at =)" grep -qx "$tmp/some-file" <<<"$(complete_words offload-lock --lock = "$tmp/some-f")"
check "--wait=DUR completes (one word)" grep -qx 1h30m <<<"$(complete_words offload-lock acquire --wait=1h)"
check "a value after --lock=PATH is skipped" grep -qx -- --watch <<<"$(complete_words offload-lock --lock = /x status --wa)"
check "help completes command names" grep -qx release <<<"$(complete_words offload-lock help rel)"
# The systemd-tmpfiles snippet README shows is the one installed.
while read -r line; do
  check "README shows the tmpfiles line: $line" grep -qxF -- "$line" "$readme"
done < <(grep -v '^#' "$src/doc/offload-lock.tmpfiles.conf")
check "cmake installs the tmpfiles snippet" grep -q 'doc/offload-lock.tmpfiles.conf DESTINATION ${CMAKE_INSTALL_DOCDIR}' "$src/CMakeLists.txt"
echo "docs: $passed passed, $failed failed"
test "$failed" -eq 0
