"""Ctrl-C right after the library has taken the lock: the KeyboardInterrupt
either reaches the caller with the lock given back, or comes inside the
block, which then releases it. Never is the lock left held by a handle
nobody can reach (a context variable kept it alive, and the GPU stayed
reserved for the life of the process).

The moment is hit exactly, not by chance: a child Python sends itself
SIGINT at the N-th point where Python runs signal handlers (a Python
function of the package starting, a call of a C function from it
returning) after the C library returned the lock, for every N up to the
start of the block."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import py_env

CHILD = r"""
import json, os, signal, sys
import offload_lock
from offload_lock import _native as N

# As in a program started from a terminal (a background test run inherits
# SIGINT ignored, and Python then installs no handler).
signal.signal(signal.SIGINT, signal.default_int_handler)
path, kind = sys.argv[1], sys.argv[2]
options = {"wait": 0} if kind == "plain" else {"wait": 0, "gpus": 2}
pkg = os.path.dirname(os.path.abspath(offload_lock.__file__))
state = {}
real_acquire = N.acquire_ex

def acquire_ex(*args):
    rc = real_acquire(*args)
    if rc == N.OK:
        state["taken"] = True  # from here on, count the package's lines
    return rc

N.acquire_ex = acquire_ex

def profiler(frame, event, arg):
    # A pending signal's handler runs where the interpreter checks for one:
    # as a function starts, and after a call (of a C function here). For
    # "c_return" `frame` is the caller's.
    if event not in ("call", "c_return") or not frame.f_code.co_filename.startswith(pkg):
        return
    if state["taken"] and not state["fired"]:
        if state["count"] == state["target"]:
            state["fired"] = True
            os.kill(os.getpid(), signal.SIGINT)
        state["count"] += 1

for target in range(400):
    state.update(taken=False, fired=False, count=0, target=target)
    interrupted = entered = False
    sys.setprofile(profiler)
    try:
        with offload_lock.lock(path, **options):
            sys.setprofile(None)
            entered = True
    except KeyboardInterrupt:
        interrupted = True
    sys.setprofile(None)
    held = any(s["held"] for s in offload_lock.inspect(path)["slots"])
    print(json.dumps({"target": target, "fired": state["fired"], "interrupted": interrupted,
                      "entered": entered, "held": held}), flush=True)
    if held or not state["fired"]:
        break  # past the block (nothing left to hit), or the defect shown
"""


@pytest.mark.parametrize("kind", ["plain", "slots"])
def test_ctrl_c_after_the_lock_is_taken_never_leaves_it_held(lock_path, kind):
    r = subprocess.run([sys.executable, "-c", CHILD, lock_path, kind], capture_output=True, text=True, timeout=120,
                       env=py_env())
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    hit = [row for row in rows if row["fired"]]
    assert len(hit) >= 5, rows  # the stretch between the C call and the block was walked
    for row in hit:
        # Every Ctrl-C reaches the caller as KeyboardInterrupt, and the lock
        # is free afterwards, wherever it landed.
        assert row["interrupted"] and not row["held"], row
    assert not rows[-1]["fired"]  # walked to the end: the last target was past the block
