"""Where the package finds liboffload_lock: next to itself, in its own
checkout's build tree (a relative BUILD_DIR taken from the checkout's root,
never from the current directory), or by the installed soname. A library
planted in the current directory never runs."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

import offload_lock

PLANTED_C = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
  const char* m = getenv("PLANTED_MARKER");
  if (m) close(open(m, O_WRONLY | O_CREAT, 0644));
}
"""


def _package_copy(dest: str) -> str:
    """The package's Python files (no bundled library) under dest."""
    pkg = os.path.join(dest, "offload_lock")
    os.makedirs(pkg)
    here = os.path.dirname(os.path.abspath(offload_lock.__file__))
    for f in glob.glob(os.path.join(here, "*.py")):
        shutil.copy(f, pkg)
    return dest


def _run(code: str, cwd: str, pythonpath: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_LOCK_LIBRARY", "BUILD_DIR", "LD_LIBRARY_PATH")}
    e.update(env, PYTHONPATH=pythonpath)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=e, capture_output=True, text=True, timeout=60)


def _real_library() -> str:
    path = offload_lock.library_path
    assert path and os.path.isabs(path), path
    return os.path.realpath(path)


@pytest.fixture
def checkout(tmp_path):
    """A checkout's layout: compat/python/offload_lock and the C header."""
    root = tmp_path / "repo"
    (root / "include" / "offload_lock").mkdir(parents=True)
    (root / "include" / "offload_lock" / "offload_lock.h").write_text("")
    _package_copy(str(root / "compat" / "python"))
    return root


def test_a_library_planted_in_the_current_directory_never_runs(checkout, tmp_path):
    if not shutil.which("cc"):
        pytest.skip("no C compiler to build the planted library")
    work = tmp_path / "work"
    (work / "build").mkdir(parents=True)
    src = tmp_path / "planted.c"
    src.write_text(PLANTED_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(work / "build" / "liboffload_lock.so"), str(src)], check=True)
    marker = tmp_path / "planted-ran"
    r = _run("import offload_lock", str(work), str(checkout / "compat" / "python"), BUILD_DIR="build",
             PLANTED_MARKER=str(marker))
    assert not marker.exists(), "the library planted in ./build was loaded"
    # Nothing else to load here: a clear ImportError that names the soname.
    assert r.returncode != 0 and "liboffload_lock.so.0.2" in r.stderr, r.stderr


def test_a_relative_build_dir_is_the_checkouts(checkout, tmp_path):
    (checkout / "out").mkdir()
    shutil.copy(_real_library(), checkout / "out" / "liboffload_lock.so")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _run("import offload_lock; print(offload_lock.library_path)", str(elsewhere),
             str(checkout / "compat" / "python"), BUILD_DIR="out")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(checkout / "out" / "liboffload_lock.so")


def test_the_installed_soname_is_found_by_the_loader(tmp_path):
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(_real_library(), libdir / "liboffload_lock.so.0.2")
    site = _package_copy(str(tmp_path / "site"))  # outside any checkout, nothing bundled
    r = _run("import offload_lock; print(offload_lock.library_path); print(offload_lock.parse_duration('1d'))",
             str(tmp_path), site, LD_LIBRARY_PATH=str(libdir))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["liboffload_lock.so.0.2", "86400.0"]


def test_offload_lock_library_must_exist(tmp_path):
    site = _package_copy(str(tmp_path / "site"))
    r = _run("import offload_lock", str(tmp_path), site, OFFLOAD_LOCK_LIBRARY="no-such.so")
    assert r.returncode != 0 and "OFFLOAD_LOCK_LIBRARY=no-such.so: no such file" in r.stderr, r.stderr


def test_the_package_is_python_3_9(tmp_path):
    # Syntax any python3 >= 3.9 accepts (the package claims Requires-Python >= 3.9).
    import ast

    here = os.path.dirname(os.path.abspath(offload_lock.__file__))
    for f in sorted(glob.glob(os.path.join(here, "*.py"))):
        with open(f, encoding="utf-8") as fh:
            ast.parse(fh.read(), f, feature_version=(3, 9))
