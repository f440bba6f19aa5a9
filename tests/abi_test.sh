#!/usr/bin/env bash
# The shared library exports the public API and nothing else: every dynamic
# symbol it defines is a C API function (offload_lock_*, each declared in
# include/offload_lock/offload_lock.h) or a name of namespace offload_lock::
# outside detail, and every function the C header declares is there.
# Usage: abi_test.sh LIBRARY SOURCE_DIR
set -euo pipefail
lib=$1
src=$2
syms=$(nm -D --defined-only "$lib" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }')
[ -n "$syms" ] || { echo "no dynamic symbols in $lib"; exit 1; }
status=0
while IFS= read -r mangled; do
  plain=$(printf '%s\n' "$mangled" | c++filt)
  case "$plain" in
    offload_lock::detail::*) echo "exported internal symbol: $plain"; status=1 ;;
    # (A member of the public class lock may take a detail type as an argument.)
    offload_lock::*) ;;
    offload_lock_*)
      grep -q "\b$plain *(" "$src/include/offload_lock/offload_lock.h" ||
        { echo "exported C symbol not declared in offload_lock.h: $plain"; status=1; } ;;
    *) echo "exported symbol outside the API: $plain"; status=1 ;;
  esac
done <<<"$syms"
# And the other way: every C function of the header is exported.
for f in $(grep -oE '\boffload_lock_[a-z_]+ *\(' "$src/include/offload_lock/offload_lock.h" | tr -d ' (' | sort -u); do
  printf '%s\n' "$syms" | grep -qx "$f" || { echo "C API function not exported: $f"; status=1; }
done
n=$(printf '%s\n' "$syms" | wc -l)
[ $status -eq 0 ] && echo "$n exported symbols, all public API"
exit $status
