#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs consumers
# the ways doc/library.md tells people to: find_package against the
# installed package (static and shared), a C program through pkg-config
# (the shared library, found at run time through the rpath the .pc file
# gives; the static library through offload_lock-static; a fully static
# link with --static), and add_subdirectory of the source tree. No consumer
# is run with LD_LIBRARY_PATH: each must find its library as built.
#   run.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
unset LD_LIBRARY_PATH
passed=0
ok() { passed=$((passed + 1)); echo "ok: $1"; }
# The shared objects a program asks for by name (readelf, not ldd: ldd runs
# the loader and would resolve through whatever the environment says).
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# Where the loader finds liboffload_lock for the program, from ldd's output
# (captured first: with pipefail, `ldd | grep -q` fails whenever grep stops
# reading before ldd is done writing).
resolved() { ldd "$1" | sed -n 's/^\s*liboffload_lock[^ ]* => \([^ ]*\) .*/\1/p'; }

cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/offload-lock"
test -f "$work/prefix/share/man/man1/offload-lock.1"
test -f "$work/prefix/share/bash-completion/completions/offload-lock"
"$work/prefix/bin/offload-lock" --version
ok "install: the command, its man page and completion"

cmake -S "$src/tests/consumer" -B "$work/pkg" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/pkg" >/dev/null
"$work/pkg/consumer" "$work/a.lock"
if needed "$work/pkg/consumer" | grep -q liboffload_lock; then
  echo "FAIL: the consumer of offload_lock::offload_lock needs the shared library"; exit 1
fi
ok "find_package, offload_lock::offload_lock (static)"
# CMake gives a program linked to an imported shared library outside the
# system directories a build-tree rpath to it.
"$work/pkg/consumer_shared" "$work/b.lock"
lib=$(resolved "$work/pkg/consumer_shared")
case "$lib" in "$work/prefix/"*) ;; *) echo "FAIL: consumer_shared loads liboffload_lock from '$lib'"; exit 1 ;; esac
ok "find_package, offload_lock::offload_lock_shared, found through CMake's rpath"

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
mkdir -p "$work/c" "$work/c-static" "$work/c-full"
# shellcheck disable=SC2046
cc -o "$work/capi" "$src/tests/capi/capi_test.c" $(pkg-config --cflags --libs offload_lock)
needed "$work/capi" | grep -qx 'liboffload_lock\.so\.[0-9]*\.[0-9]*'
lib=$(resolved "$work/capi")
case "$lib" in "$work/prefix/"*) ;; *) echo "FAIL: the pkg-config consumer loads liboffload_lock from '$lib'"; exit 1 ;; esac
"$work/capi" "$work/c"
ok "pkg-config offload_lock: the shared library, found through the .pc file's rpath"

# shellcheck disable=SC2046
cc -o "$work/capi-static" "$src/tests/capi/capi_test.c" $(pkg-config --cflags --libs offload_lock-static)
if needed "$work/capi-static" | grep -q liboffload_lock; then
  echo "FAIL: the offload_lock-static consumer needs the shared library"; exit 1
fi
"$work/capi-static" "$work/c-static"
ok "pkg-config offload_lock-static: no liboffload_lock.so needed"

# shellcheck disable=SC2046
cc -static -o "$work/capi-full" "$src/tests/capi/capi_test.c" $(pkg-config --cflags --static --libs offload_lock)
if readelf -d "$work/capi-full" | grep -q NEEDED; then
  echo "FAIL: cc -static with pkg-config --static left shared objects to load:"; needed "$work/capi-full"; exit 1
fi
"$work/capi-full" "$work/c-full"
ok "cc -static with pkg-config --static offload_lock: nothing loaded at run time"

cmake -S "$src/tests/consumer" -B "$work/sub" -G Ninja -DOFFLOAD_LOCK_SOURCE="$src" >/dev/null
cmake --build "$work/sub" --target consumer >/dev/null
"$work/sub/consumer" "$work/c.lock"
ok "add_subdirectory"
echo "consumer builds: $passed passed, 0 failed"
