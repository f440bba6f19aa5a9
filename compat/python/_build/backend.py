"""A PEP 517 build backend for the offload_lock package, with nothing but the
standard library, so that `pip install ./compat/python` works without a
package index.

The wheel holds the pure-Python package and, next to it, the
liboffload_lock.so it is to load, copied from (first match wins):
$OFFLOAD_LOCK_LIBRARY, then the build tree of this checkout
($BUILD_DIR, else ../../build; a relative BUILD_DIR is taken from the
checkout's root), stripped of its debugging symbols (`strip`, when
binutils has it). Set OFFLOAD_LOCK_NO_BUNDLE=1 to leave it out and use the
system's (cmake --install) at run time. Because of the bundled library the
wheel is tagged for this platform. Any python3 >= 3.9 builds it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME = "offload_lock"
DIST = "offload_lock"
VERSION = "0.2.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # compat/python
ROOT = os.path.dirname(os.path.dirname(HERE))


def _library() -> str | None:
    if os.environ.get("OFFLOAD_LOCK_NO_BUNDLE") == "1":
        return None
    env = os.environ.get("OFFLOAD_LOCK_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise RuntimeError(f"OFFLOAD_LOCK_LIBRARY={env}: no such file")
        return env
    build = os.path.join(ROOT, os.environ.get("BUILD_DIR") or "build")  # join keeps an absolute BUILD_DIR
    lib = os.path.join(build, "liboffload_lock.so")
    if os.path.isfile(lib):
        return os.path.realpath(lib)
    # One line, not a traceback: pip shows what the backend printed.
    sys.stderr.write(
        f"offload_lock: {lib} not found. Build the library first (scripts/build --command-only builds it), "
        "or set OFFLOAD_LOCK_LIBRARY to a liboffload_lock.so, "
        "or OFFLOAD_LOCK_NO_BUNDLE=1 to use an installed one at run time.\n"
    )
    raise SystemExit(1)


def _stripped(path: str) -> bytes:
    """The library's bytes without debugging symbols: what a wheel needs
    (the build tree's copy keeps them for debuggers)."""
    strip = shutil.which("strip")
    if strip:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "liboffload_lock.so")
            r = subprocess.run([strip, "--strip-unneeded", "-o", out, path], capture_output=True)
            if r.returncode == 0:
                with open(out, "rb") as f:
                    return f.read()
    with open(path, "rb") as f:
        return f.read()


def _tag() -> str:
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{plat}"


def _metadata() -> str:
    readme = ""
    try:
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            readme = f.read()
    except OSError:
        pass
    return (
        "Metadata-Version: 2.1\n"
        f"Name: offload-lock\nVersion: {VERSION}\n"
        "Summary: The machine-wide GPU lock (offload-lock) for Python\n"
        "Requires-Python: >=3.9\n"
        "Description-Content-Type: text/markdown\n\n" + readme
    )


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _files():
    pkg = os.path.join(HERE, NAME)
    for entry in sorted(os.listdir(pkg)):
        full = os.path.join(pkg, entry)
        if entry.endswith((".py", ".typed")) and os.path.isfile(full):
            with open(full, "rb") as f:
                yield f"{NAME}/{entry}", f.read()
    lib = _library()
    if lib:
        yield f"{NAME}/liboffload_lock.so", _stripped(lib)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _write_wheel(wheel_directory: str, members) -> str:
    tag = _tag()
    name = f"{DIST}-{VERSION}-{tag}.whl"
    info = f"{DIST}-{VERSION}.dist-info"
    members = list(members)
    members.append((f"{info}/METADATA", _metadata().encode()))
    members.append((f"{info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: offload_lock backend\nRoot-Is-Purelib: false\n" f"Tag: {tag}\n"
    ).encode()))
    members.append((f"{info}/entry_points.txt", b"[pytest11]\noffload_lock = offload_lock.pytest_plugin\n"))
    members.append((f"{info}/top_level.txt", f"{NAME}\n".encode()))
    record = [_record_line(n, d) for n, d in members] + [f"{info}/RECORD,,"]
    members.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    path = os.path.join(wheel_directory, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in members:
            zi = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if n.endswith(".so") else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth pointing at this directory; the library is found as at run time
    # (OFFLOAD_LOCK_LIBRARY, or the system's).
    return _write_wheel(wheel_directory, [(f"{DIST}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    import tarfile

    base = f"{DIST}-{VERSION}"
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"] + [
            f"{NAME}/{e}" for e in sorted(os.listdir(os.path.join(HERE, NAME))) if e.endswith((".py", ".typed"))
        ]:
            full = os.path.join(HERE, rel)
            if os.path.exists(full):
                t.add(full, arcname=f"{base}/{rel}")
        pkg_info = _metadata().encode()
        import io

        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return base + ".tar.gz"
