#!/usr/bin/env bash
# The documentation a user reads agrees with the command: every command of
# `offload-lock --help` and every option of `offload-lock COMMAND --help` is
# in the man page and offered by the bash completion; each command's
# synopsis is the same in its --help, `offload-lock help COMMAND`, the
# top-level help and doc/command.md; the short options are documented
# everywhere; README.md's table names every command; the completion
# completes after `run --` and file names for --lock; the man page renders
# without warnings. And the documents agree with the tree: every relative
# link in README.md, CHANGELOG.md and doc/*.md reaches a file (and a
# heading, with #anchor); every rule a source comment cites is a rule of
# doc/protocol.md; every test doc/protocol.md names exists in the file it
# names.
#   docs_test.sh OFFLOAD_LOCK SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
man=$src/doc/offload-lock.1 completion=$src/doc/offload-lock.bash-completion readme=$src/README.md
command_doc=$src/doc/command.md protocol=$src/doc/protocol.md operations=$src/doc/operations.md
failed=0 passed=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}" >/dev/null 2>&1; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}
complete_words() {  # the completions offered after the given words (the last one being completed)
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _offload_lock; printf "%s\n" "${COMPREPLY[@]}"' _ "$completion" "$@"
}
squeeze() { tr -s ' \n' ' '; }
# Whether $2 holds $1 (in the shell: the checks below make hundreds of these).
contains() { [[ $2 == *"$1"* ]]; }
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
command_text=$(squeeze <"$command_doc")
top_text=$("$bin" --help | squeeze)
for c in $commands; do
  check "man page documents '$c'" grep -qE "^\.BR? $c( |$)" <<<"$plain"
  check "completion offers '$c'" grep -qx -- "$c" <<<"$top"
  check "help $c and $c --help print the same text" test "$("$bin" help "$c")" = "$("$bin" "$c" --help)"
  syn=$(synopsis "$c")
  check "the top-level help has $c's synopsis: $syn" grep -qF -- "$syn" <<<"$top_text"
  check "doc/command.md has $c's synopsis: $syn" grep -qF -- "$syn" <<<"$command_text"
  check "README's table names '$c'" grep -qE -- "^\| .* \| .*\`$c( [^\`]*)?\`" "$readme"
  offered=$(complete_words offload-lock "$c" "")
  for opt in $("$bin" "$c" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    check "man page documents '$c $opt'" grep -q -- "$opt" <<<"$plain"
    check "completion offers '$c $opt'" grep -qx -- "$opt" <<<"$offered"
  done
done
for short in -w -l -j -q -h; do
  check "--help documents $short" grep -qE -- "(^|[ [])$short[ ,|]" <<<"$("$bin" --help)"
  check "man page documents $short" grep -qE -- "(^|[ [])$short([ ,|]|$)" <<<"$plain"
  check "doc/command.md documents $short" grep -qE -- "(^|[ [\`])$short[ ,|\`]" "$command_doc"
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
# The systemd-tmpfiles snippet doc/operations.md shows is the one installed.
while read -r line; do
  check "doc/operations.md shows the tmpfiles line: $line" grep -qxF -- "$line" "$operations"
done < <(grep -v '^#' "$src/doc/offload-lock.tmpfiles.conf")
check "cmake installs the tmpfiles snippet" grep -q 'doc/offload-lock.tmpfiles.conf DESTINATION ${CMAKE_INSTALL_DOCDIR}' "$src/CMakeLists.txt"

# Links between the documents: the file, and the heading an #anchor names
# (GitHub's rule: lower case, punctuation dropped, spaces as hyphens).
slug() { tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'; }
declare -A headings  # file -> its headings' anchors, one a line
for doc in "$readme" "$src/CHANGELOG.md" "$src"/doc/*.md; do
  while read -r link; do
    target=${link%%#*} anchor=
    [[ $link == *'#'* ]] && anchor=${link#*#}
    file=$(dirname "$doc")/$target
    [ -z "$target" ] && file=$doc
    check "${doc#"$src"/}: link '$link' names a file" test -e "$file"
    if [ -n "$anchor" ] && [ -f "$file" ]; then
      [ -n "${headings[$file]+set}" ] || headings[$file]=$'\n'$(sed -n 's/^#\{1,6\} //p' "$file" | slug)$'\n'
      check "${doc#"$src"/}: link '$link' names a heading" contains $'\n'"$anchor"$'\n' "${headings[$file]}"
    fi
  done < <(grep -oE '\]\([^)[:space:]]+\)' "$doc" | sed 's/^](//; s/)$//' | grep -vE '^[a-z]+:')
done

# Rule ids: what the code cites is in doc/protocol.md, under a heading
# ("### B6. ...") or as a row of the defects table ("| D7 |").
rules=$( (sed -n 's/^### \([ABQ][0-9]*\)\. .*/\1/p' "$protocol"; sed -n 's/^| \(D[0-9]\) |.*/\1/p' "$protocol") | sort -u)
check "doc/protocol.md has rules A1-A6, B1-B11 and D1-D8" \
  test "$(grep -cxE 'A[1-6]|B([1-9]|1[01])|D[1-8]' <<<"$rules")" -eq 25
sources=("$src/src" "$src/include" "$src/tests" "$src/compat" "$src/scripts" "$src/CMakeLists.txt")
cited=$(grep -rhoE 'doc/protocol\.md,? (rule |part )?[ABDQ][0-9]+([-, /]+(and )?[ABDQ][0-9]+)*' "${sources[@]}" |
        grep -oE '[ABDQ][0-9]+' | sort -u)
check "source comments cite doc/protocol.md rules (found: $(echo $cited))" test -n "$cited"
for r in $cited; do
  check "the cited rule $r is in doc/protocol.md" contains $'\n'"$r"$'\n' $'\n'"$rules"$'\n'
done
outside=$(grep -rlE '\.\./shared/|PROTOCOL\.md|PROTOCOL [ABD][0-9]' "${sources[@]}" "$readme" "$src/doc" |
          grep -v '/tests/cli/docs_test\.sh$')
check "nothing cites a protocol document outside the repository: $outside" test -z "$outside"

# Every "Pinned by" entry of doc/protocol.md: the file exists and holds each
# test it names (“a Catch2 or node:test name”, `TestGoFunction`,
# `test_pytest_function`). Entries wrap over lines; one entry may name
# several files, each as `path`: ..., separated by "; `".
awk '/^Pinned by:/ {on = 1; next}
     on && /^- / {if (item != "") print item; item = substr($0, 3); next}
     on && /^  / {sub(/^ +/, " "); item = item $0; next}
     on {if (item != "") print item; item = ""; on = 0}
     END {if (item != "") print item}' "$protocol" | sed 's/; `/\n`/g' >"$tmp/pins"
named=0
while IFS= read -r part; do
  [[ $part =~ ^\`((tests|compat)/[^\`]+)\` ]] || continue
  path=${BASH_REMATCH[1]%% *}  # `tests/interop/stress.mjs --mode mixed`: the file
  check "doc/protocol.md names $path, which exists" test -f "$src/$path"
  [ -f "$src/$path" ] || continue
  # The sources escape quotes and backslashes inside string literals.
  text=$(sed 's/\\\(.\)/\1/g' "$src/$path")
  while IFS= read -r name; do
    [ -z "$name" ] && continue
    named=$((named + 1))
    check "$path has the test '$name'" contains "$name" "$text"
  done < <(grep -oE '“[^”]+”' <<<"$part" | sed 's/^“//; s/”$//'
           grep -oE '`(Test[A-Za-z0-9_]+|test_[a-z0-9_]+)`' <<<"$part" | tr -d '`')
done <"$tmp/pins"
check "doc/protocol.md names at least 100 tests (found $named)" test "$named" -ge 100
echo "docs: $passed passed, $failed failed"
test "$failed" -eq 0
