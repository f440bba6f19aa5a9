"""The wheel the in-tree backend builds: the package's modules, and a
stripped copy of the library (no debugging sections), tagged for this
platform."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from conftest import PKG


def test_the_wheel_bundles_a_stripped_library(tmp_path):
    code = "import sys; sys.path.insert(0, '_build'); import backend; print(backend.build_wheel(sys.argv[1]))"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=PKG, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    wheel = tmp_path / r.stdout.strip()
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        lib = z.read("offload_lock/liboffload_lock.so")
    for module in ("_native.py", "_words.py", "_lock.py", "_signals.py", "pytest_plugin.py", "py.typed"):
        assert f"offload_lock/{module}" in names
    assert lib[:4] == b"\x7fELF"
    assert b".debug_info" not in lib, "the bundled library keeps its debugging sections"
    assert len(lib) < 4 * 1024 * 1024, len(lib)


def test_without_a_built_library_the_build_says_what_to_run(tmp_path):
    code = "import sys; sys.path.insert(0, '_build'); import backend; backend.build_wheel(sys.argv[1])"
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_LOCK_LIBRARY", "OFFLOAD_LOCK_NO_BUNDLE")}
    env["BUILD_DIR"] = str(tmp_path / "no-build")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=PKG, capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "scripts/build --command-only" in r.stderr and str(tmp_path / "no-build") in r.stderr
