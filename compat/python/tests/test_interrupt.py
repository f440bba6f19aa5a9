"""Ctrl-C (a real SIGINT to a real waiting process) and asyncio cancellation
end a wait at once and leave nothing behind: no lock, no waiter entry."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import offload_lock
from conftest import cli_holder, py_env, wait_until

SIGINT_WAITER = r"""
import os, signal, sys, threading, time, offload_lock
path, mode = sys.argv[1], sys.argv[2]
# As in a program started from a terminal: a test run started in the
# background inherits SIGINT ignored, and Python then installs no handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
if mode == "thread":
    # Held by another thread of this process: the wait is in-process.
    held = threading.Event()
    def holder():
        with offload_lock.lock(path, label="thread-holder"):
            held.set()
            time.sleep(60)
    threading.Thread(target=holder, daemon=True).start()
    held.wait()
print("waiting", flush=True)
try:
    offload_lock.lock(path, label="sigint-waiter", gpus=2 if mode == "slots" else None).acquire()
    print("acquired", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
    print("env", os.environ.get("OFFLOAD_LOCK_TOKEN"), flush=True)
    print("threads", threading.active_count(), flush=True)
    os._exit(0)
"""


@pytest.mark.parametrize("mode", ["process", "thread", "slots"])
def test_sigint_ends_a_wait_within_100ms_leaving_nothing(lock_path, mode):
    holders = []
    if mode != "thread":
        holders.append(cli_holder(lock_path, label="render-video"))
    if mode == "slots":
        holders.append(cli_holder(lock_path + ".gpu1", label="render-video-1"))
    try:
        p = subprocess.Popen([sys.executable, "-c", SIGINT_WAITER, lock_path, mode], stdout=subprocess.PIPE, text=True,
                             env=py_env())
        assert p.stdout.readline().strip() == "waiting"
        if mode == "thread":
            time.sleep(0.3)  # well inside the wait (in-process waits are not registered)
        else:
            wait_until(lambda: [w for w in offload_lock.waiters(lock_path) if w["pid"] == p.pid], what="the waiter entry")
        sent = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail("SIGINT did not end the wait")
        assert p.returncode == 0, out
        lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
        assert "interrupted" in lines, out
        assert float(lines["interrupted"]) - sent < 0.1
        if mode != "thread":
            assert lines["env"] == "None"  # the waiter exported nothing
            assert lines["threads"] == "1"  # the helper thread has ended
            assert offload_lock.waiters(lock_path) == []
            i = offload_lock.inspect(lock_path)
            assert i["held"] and i["pid"] == holders[0].pid
            # The queue registry keeps nothing of the waiter: no entry, no wake channel.
            registry = os.path.join(os.path.dirname(lock_path), ".gpu.lock.queue")
            assert not os.path.exists(registry) or all(
                os.listdir(os.path.join(registry, d)) == [] for d in os.listdir(registry))
    finally:
        for h in holders:
            assert h.stop() == 0
    if mode == "slots":
        assert not os.path.exists(lock_path + ".gpu1")
    if mode == "thread":  # its holder thread went with the process (os._exit): stale at once
        assert not offload_lock.inspect(lock_path)["held"]
    else:
        assert not os.path.exists(lock_path)


async def _ticking():
    ticks = [0]

    async def tick():
        while True:
            await asyncio.sleep(0.01)
            ticks[0] += 1

    return ticks, asyncio.ensure_future(tick())


def _run_bounded(coro_fn, timeout=20.0):
    # A broken cancel would hang the loop; fail instead.
    box = {}

    def run():
        try:
            asyncio.run(coro_fn())
            box["ok"] = True
        except BaseException as e:
            box["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail("the event loop hung")
    if "e" in box:
        raise box["e"]


def test_asyncio_cancel_ends_the_wait_and_leaves_nothing(lock_path):
    holder = cli_holder(lock_path, label="render-video")

    async def main():
        ticks, ticker = await _ticking()
        entered = []

        async def waiter():
            async with offload_lock.lock_async(lock_path, label="async-waiter"):
                entered.append(1)

        task = asyncio.ensure_future(waiter())
        end = time.monotonic() + 10
        while not offload_lock.waiters(lock_path) and time.monotonic() < end:
            await asyncio.sleep(0.01)
        assert offload_lock.waiters(lock_path)[0]["label"] == "async-waiter"
        before = ticks[0]
        await asyncio.sleep(0.2)
        assert ticks[0] - before >= 10  # the loop runs while the task waits
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - t0 < 0.1
        ticker.cancel()
        assert not entered

    try:
        _run_bounded(main)
        assert offload_lock.waiters(lock_path) == []
        i = offload_lock.inspect(lock_path)
        assert i["held"] and i["pid"] == holder.pid
    finally:
        assert holder.stop() == 0
    assert not os.path.exists(lock_path)


def test_asyncio_waits_for_release_and_tasks_take_turns(lock_path):
    holder = cli_holder(lock_path)
    inside = []
    overlaps = []

    async def job(n):
        async with offload_lock.lock_async(lock_path, wait="30s") as h:
            assert not h.nested  # another task's lock is not this task's
            inside.append(n)
            if len(inside) > 1:
                overlaps.append(list(inside))
            await asyncio.sleep(0.05)
            inside.remove(n)
            return n

    @offload_lock.lock(lock_path, wait="30s")
    async def decorated():
        return offload_lock.inspect(lock_path)["pid"]

    async def main():
        jobs = [asyncio.ensure_future(job(n)) for n in range(4)]
        await asyncio.sleep(0.2)
        assert not any(j.done() for j in jobs)
        holder.stop()
        assert sorted(await asyncio.gather(*jobs)) == [0, 1, 2, 3]
        assert await decorated() == os.getpid()

    asyncio.run(main())
    assert not overlaps
    assert not os.path.exists(lock_path)


def test_asyncio_timeout_and_busy(lock_path):
    holder = cli_holder(lock_path, label="render-video")

    async def main():
        with pytest.raises(offload_lock.Busy):
            async with offload_lock.lock_async(lock_path, wait=0):
                pass
        with pytest.raises(offload_lock.Timeout) as e:
            async with offload_lock.lock_async(lock_path, wait=0.2):
                pass
        assert "render-video" in str(e.value)

    try:
        asyncio.run(main())
    finally:
        holder.stop()


SIGNALLED_WAITER = r"""
import signal, sys, offload_lock
seen = []
def handler(*a):
    seen.append(1)
    print("handled", len(seen), flush=True)
signal.signal(signal.SIGUSR1, handler)
print("waiting", flush=True)
with offload_lock.lock(sys.argv[1], wait=30, label="usr1-waiter") as h:
    print("acquired", len(seen), flush=True)
"""


def test_a_signal_whose_handler_returns_does_not_end_the_wait(lock_path):
    holder = cli_holder(lock_path)
    p = subprocess.Popen([sys.executable, "-c", SIGNALLED_WAITER, lock_path], stdout=subprocess.PIPE, text=True,
                         env=py_env())
    try:
        assert p.stdout.readline().strip() == "waiting"
        wait_until(lambda: [w for w in offload_lock.waiters(lock_path) if w["pid"] == p.pid], what="the waiter entry")
        for k in range(1, 4):
            # One at a time: two signals pending at once would be handled once.
            os.kill(p.pid, signal.SIGUSR1)
            assert p.stdout.readline().split() == ["handled", str(k)]
        assert p.poll() is None  # still waiting
        holder.stop()
        out, _ = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    assert out.split() == ["acquired", "3"]


def test_asyncio_signal_handlers_still_run_after_a_blocking_wait(lock_path):
    # A blocking acquire inside a running loop borrows the signal wakeup
    # descriptor; the loop's own signal handlers must still fire.
    code = r"""
import asyncio, os, signal, sys, threading, time, offload_lock
async def main():
    loop = asyncio.get_running_loop()
    got = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, got.set)
    def poke():
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGUSR1)
    threading.Thread(target=poke).start()
    try:
        offload_lock.lock(sys.argv[1], wait=0.8).acquire()   # blocks the loop; SIGUSR1 arrives meanwhile
    except offload_lock.Timeout:
        pass
    await asyncio.wait_for(got.wait(), 5)
    print("handled")
asyncio.run(main())
"""
    holder = cli_holder(lock_path)
    try:
        r = subprocess.run([sys.executable, "-c", code, lock_path], capture_output=True, text=True, timeout=30, env=py_env())
    finally:
        holder.stop()
    assert r.returncode == 0 and r.stdout.strip() == "handled", r.stderr
