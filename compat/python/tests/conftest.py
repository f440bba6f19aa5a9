"""Shared helpers for the offload_lock tests: real processes (the offload-lock
CLI, Node through compat/node, other Python interpreters) on a real temporary
directory, and waits for events with generous upper bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)  # compat/python
ROOT = os.path.dirname(os.path.dirname(PKG))


def _cli() -> str:
    env = os.environ.get("OFFLOAD_LOCK_BIN")
    if env:
        return env
    return os.path.join(os.environ.get("BUILD_DIR") or os.path.join(ROOT, "build"), "offload-lock")


CLI = _cli()
NODE_INDEX = os.path.join(ROOT, "compat", "node", "index.mjs")


def wait_until(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


class Holder:
    """A process that holds the lock until stop() (its stdin closes)."""

    def __init__(self, argv: List[str], ready: str, env: Optional[Dict[str, str]] = None) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith(ready):
            err = self.proc.stderr.read() if self.proc.stderr else ""
            self.proc.kill()
            raise AssertionError(f"{argv[0]} did not take the lock: {line!r} {err!r}")
        self.line = line
        self.pid = self.proc.pid

    def stop(self) -> int:
        if self.proc.stdin:
            self.proc.stdin.close()
        return self.proc.wait(10)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def cli_holder(path: str, label: str = "cli-holder") -> Holder:
    h = Holder([CLI, "--lock", path, "hold", "--wait", "0", "--label", label], "acquired ")
    h.info = json.loads(h.line[len("acquired "):])
    return h


# The C++ library linked into a program of its own (the interop suite's
# participant): `hold` says "waiting PID", then "acquired PID" once it holds.
CPP_PARTICIPANT = os.path.join(os.path.dirname(CLI), "tests", "interop", "interop_participant")


def cpp_holder(path: str) -> Holder:
    h = Holder([CPP_PARTICIPANT, "hold", "--lock", path, "--wait-ms", "0", "--label", "cpp-holder"], "waiting ")
    line = h.proc.stdout.readline() if h.proc.stdout else ""
    if not line.startswith("acquired "):
        h.kill()
        raise AssertionError(f"the C++ participant did not take the lock: {line!r}")
    return h


NODE_HOLD = r"""
import { acquireGpuLock } from %s;
const lock = await acquireGpuLock({ lockPath: process.argv[1], waitMs: %s, label: 'node-holder' });
if (!lock) { console.log('busy'); process.exit(1); }
console.log('held ' + lock.token);
process.stdin.resume();
process.stdin.on('end', () => { lock.release(); process.exit(0); });
"""


def node_holder(path: str) -> Holder:
    script = NODE_HOLD % (json.dumps(NODE_INDEX), "0")
    env = dict(os.environ, OFFLOAD_LOCK_BIN=CLI)
    return Holder(["node", "--input-type=module", "-e", script, path], "held ", env=env)


PY_HOLD = r"""
import sys, offload_lock
h = offload_lock.lock(sys.argv[1], wait=0, label="py-holder").acquire()
print("held", h.token, flush=True)
sys.stdin.read()
h.release()
"""


def py_env() -> Dict[str, str]:
    """The environment for a child Python that imports the package under test."""
    env = dict(os.environ)
    return env


def py_holder(path: str) -> Holder:
    return Holder([sys.executable, "-c", PY_HOLD, path], "held ", env=py_env())


def run_py(code: str, *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env or py_env()
    )


@pytest.fixture
def lock_path(tmp_path: Any) -> str:
    """A lock in a directory of its own (so unrelated /tmp churn wakes nobody)."""
    return str(tmp_path / "gpu.lock")


@pytest.fixture(autouse=True)
def _no_inherited_lock(monkeypatch: Any) -> None:
    # A test run started under `offload-lock run` must not pass its lock down.
    monkeypatch.delenv("OFFLOAD_LOCK_PATH", raising=False)
    monkeypatch.delenv("OFFLOAD_LOCK_TOKEN", raising=False)

# The sample suite is run by test_pytest_plugin.py in its own pytest.
collect_ignore = ["xdist_sample"]


def pytest_report_header(config: Any) -> str:
    import offload_lock

    return f"offload_lock: {offload_lock.__file__}, library {offload_lock.library_path}"
