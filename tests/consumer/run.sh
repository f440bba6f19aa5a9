#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs consumers:
# find_package against the installed package (static and shared), a C
# program through pkg-config, and add_subdirectory of the source tree.
#   run.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/offload-lock"
test -f "$work/prefix/share/man/man1/offload-lock.1"
test -f "$work/prefix/share/bash-completion/completions/offload-lock"
"$work/prefix/bin/offload-lock" --version

cmake -S "$src/tests/consumer" -B "$work/pkg" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/pkg" >/dev/null
"$work/pkg/consumer" "$work/a.lock"
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib/x86_64-linux-gnu" "$work/pkg/consumer_shared" "$work/b.lock"
# The shared consumer really uses the installed shared library. (ldd's
# output is captured first: with pipefail, `ldd | grep -q` fails whenever
# grep stops reading before ldd is done writing.)
libs=$(LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib/x86_64-linux-gnu" ldd "$work/pkg/consumer_shared")
grep -q "$work/prefix/.*liboffload_lock.so" <<<"$libs"

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
# shellcheck disable=SC2046
cc -o "$work/capi" "$src/tests/capi/capi_test.c" $(pkg-config --cflags --libs offload_lock)
mkdir -p "$work/c"
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib/x86_64-linux-gnu" "$work/capi" "$work/c"

cmake -S "$src/tests/consumer" -B "$work/sub" -G Ninja -DOFFLOAD_LOCK_SOURCE="$src" >/dev/null
cmake --build "$work/sub" --target consumer >/dev/null
"$work/sub/consumer" "$work/c.lock"
echo "consumer builds: 4 passed, 0 failed"
