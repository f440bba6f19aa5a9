"""Child processes started while the lock is held pass straight through
(B11's OFFLOAD_LOCK_PATH / OFFLOAD_LOCK_TOKEN) and never release the
parent's lock: subprocess, the CLI, multiprocessing with spawn and fork,
ProcessPoolExecutor, and a bare os.fork()."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import subprocess

import pytest

import offload_lock
from conftest import CLI, run_py


def child_takes(path):
    """In the child: take the lock at once, report how, release."""
    h = offload_lock.lock(path, wait=0).acquire()
    r = (h.inherited, h.nested, h.token, h.still_held(), os.getpid())
    h.release()
    return r


def _child_main(path, q):
    q.put(child_takes(path))


CHILD = r"""
import sys, offload_lock
h = offload_lock.lock(sys.argv[1], wait=0).acquire()
print(h.inherited, h.token, h.release())
"""


def test_subprocess_children_pass_through(lock_path):
    with offload_lock.lock(lock_path) as h:
        assert os.environ["OFFLOAD_LOCK_PATH"] == lock_path and os.environ["OFFLOAD_LOCK_TOKEN"] == h.token
        r = run_py(CHILD, lock_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["True", h.token, "True"]
        cli = subprocess.run([CLI, "--lock", lock_path, "run", "--wait", "0", "--", "true"], capture_output=True)
        assert cli.returncode == 0, cli.stderr
        assert h.still_held()
    assert "OFFLOAD_LOCK_PATH" not in os.environ and "OFFLOAD_LOCK_TOKEN" not in os.environ
    assert not os.path.exists(lock_path)


def test_a_child_of_another_lock_does_not_pass_through(lock_path, tmp_path):
    with offload_lock.lock(str(tmp_path / "other.lock")):
        with offload_lock.lock(lock_path):
            pass
        holder_env = dict(os.environ)
    with offload_lock.lock(lock_path):
        env = dict(holder_env)  # names other.lock's token
        r = run_py(CHILD, lock_path, env=env)
        assert r.returncode != 0 and "Busy" in r.stderr


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_multiprocessing_children_pass_through(lock_path, method):
    ctx = multiprocessing.get_context(method)
    with offload_lock.lock(lock_path) as h:
        q = ctx.Queue()
        p = ctx.Process(target=_child_main, args=(lock_path, q))
        p.start()
        inherited, nested, token, held, pid = q.get(timeout=60)
        p.join(60)
        assert p.exitcode == 0 and pid != os.getpid()
        assert token == h.token and held and (inherited or nested)
        assert h.still_held()
    assert not os.path.exists(lock_path)


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_process_pool_children_pass_through(lock_path, method):
    with offload_lock.lock(lock_path) as h:
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method)) as ex:
            results = list(ex.map(child_takes, [lock_path] * 4))
        assert all(r[2] == h.token and (r[0] or r[1]) for r in results)
        assert h.still_held()
    assert not os.path.exists(lock_path)


def test_a_forked_child_never_releases_the_parent_lock(lock_path):
    with offload_lock.lock(lock_path) as h:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # The child leaves the parent's `with` block: nothing released.
                pass
            finally:
                try:
                    ok = h.release() is True and h.still_held() is False
                    code = 0 if ok else 2
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert h.still_held()
        assert offload_lock.inspect(lock_path)["token"] == h.token
    assert not os.path.exists(lock_path)


def test_a_forked_child_exiting_normally_leaves_the_lock(lock_path):
    # The child runs its atexit handlers (sys.exit, not os._exit).
    code = r"""
import os, sys, offload_lock
with offload_lock.lock(sys.argv[1]) as h:
    pid = os.fork()
    if pid == 0:
        sys.exit(0)
    os.waitpid(pid, 0)
    print(h.still_held(), offload_lock.inspect(sys.argv[1])["token"] == h.token)
"""
    r = run_py(code, lock_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]


def test_a_forked_child_passes_through_while_the_parent_holds_and_says_why_not_after(lock_path):
    # The library's in-process state was copied mid-hold: the child must not
    # try to take the lock itself (its queue would wait for a thread that is
    # not in this process).
    code = r"""
import os, sys, offload_lock
p = sys.argv[1]
r, w = os.pipe()
r2, w2 = os.pipe()
h = offload_lock.lock(p).acquire()
pid = os.fork()
if pid == 0:
    c = offload_lock.lock(p, wait=0).acquire()
    ok = c.inherited and c.token == h.token and c.still_held() and c.release()
    os.write(w2, b"x")
    os.read(r, 1)  # the parent has released
    try:
        offload_lock.lock(p, wait=0).acquire()
        os._exit(3)
    except offload_lock.LockError as e:
        os._exit(0 if ok and "forked while its parent held" in str(e) else 2)
os.read(r2, 1)  # the child has passed through
h.release()
os.write(w, b"x")
_, st = os.waitpid(pid, 0)
print(os.WEXITSTATUS(st))
"""
    r = run_py(code, lock_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"
    assert not os.path.exists(lock_path)
