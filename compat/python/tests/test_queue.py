"""The ordered queue from Python: priority= orders Python waiters and CLI
waiters alike, expect= is what `offload-lock --json status` shows, on_yield
is called once when a CLI waiter of a higher priority queues, and the queue's
keys of inspect() and waiters() are the CLI's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta

import pytest

import offload_lock
from conftest import CLI, cli_holder, py_env, wait_until


def cli_status(path):
    r = subprocess.run([CLI, "--lock", path, "--json", "status"], capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout)


def _clean_env():
    # Waiters of our own: never started under a lock passed down.
    return {k: v for k, v in py_env().items() if not k.startswith("OFFLOAD_LOCK_")}


def cli_waiter(path, label, priority, record):
    """`offload-lock run --priority P` that, once it holds the lock, appends
    its label to `record`."""
    return subprocess.Popen(
        [CLI, "--lock", path, "--quiet", "run", "--wait", "60", "--priority", str(priority), "--label", label,
         "--", "sh", "-c", 'echo "$0" >> "$1"', label, str(record)],
        env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


PY_WAITER = textwrap.dedent(
    """
    import sys, offload_lock
    path, label, priority, record = sys.argv[1:5]
    with offload_lock.lock(path, wait=60, label=label, priority=priority):
        with open(record, "a") as f:
            f.write(label + "\\n")
    """
)


def py_waiter(path, label, priority, record):
    return subprocess.Popen(
        [sys.executable, "-c", PY_WAITER, path, label, str(priority), str(record)],
        env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_priority_orders_python_and_cli_waiters(lock_path, tmp_path):
    record = tmp_path / "order"
    holder = cli_holder(lock_path)
    procs = []
    try:
        # Arrival order: low, mid, high, top; each is seen queued before the
        # next starts, so arrival is certain.
        arrivals = [
            (py_waiter, "py-batch", "batch"),
            (cli_waiter, "cli-normal", 0),
            (py_waiter, "py-interactive", "interactive"),
            (cli_waiter, "cli-urgent", 20),
        ]
        for k, (start, label, priority) in enumerate(arrivals):
            procs.append(start(lock_path, label, priority, record))
            wait_until(lambda: len(offload_lock.waiters(lock_path)) == k + 1, what=f"{label} queued")
        ws = offload_lock.waiters(lock_path)
        assert [w["label"] for w in ws] == ["cli-urgent", "py-interactive", "cli-normal", "py-batch"]
        assert [w["priority"] for w in ws] == [20, 10, 0, -10]
        assert [w["position"] for w in ws] == [1, 2, 3, 4]
        # The CLI's view: the same list, the same keys.
        cli = cli_status(lock_path)["waiters"]
        assert [list(w) for w in ws] == [list(w) for w in cli]
        for mine, theirs in zip(ws, cli):
            for key in ("pid", "label", "position", "priority", "expectMs", "etaMs", "gpu", "gpus"):
                assert mine[key] == theirs[key], key
    finally:
        assert holder.stop() == 0
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
    assert record.read_text().split() == ["cli-urgent", "py-interactive", "cli-normal", "py-batch"]


def _asleep_in_queue(native_id):
    """Whether a thread of this process is asleep in poll(): the library's
    in-process queue waits there, on the thread's own wake pipe and its
    cancel descriptors (a thread waiting for the GIL sleeps in a futex, and
    one that runs Python code is not asleep)."""
    base = f"/proc/self/task/{native_id}"
    try:
        with open(base + "/stat") as f:
            stat = f.read()
        with open(base + "/wchan") as f:
            wchan = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].startswith("S") and "poll" in wchan


def test_threads_of_one_process_are_served_by_priority(lock_path):
    order = []
    first = offload_lock.lock(lock_path).acquire()
    ids = []

    def waiter(name, priority):
        ids.append(threading.get_native_id())
        with offload_lock.lock(lock_path, priority=priority, wait=30):
            order.append(name)

    ts = []
    for k, (name, priority) in enumerate([("low", -5), ("normal", 0), ("high", 50)]):
        t = threading.Thread(target=waiter, args=(name, priority))
        t.start()
        ts.append(t)
        wait_until(lambda: len(ids) == k + 1 and _asleep_in_queue(ids[k]), what=f"{name} queued in the process")
    first.release()
    for t in ts:
        t.join(30)
    assert order == ["high", "normal", "low"]


def test_a_cancelled_thread_leaves_the_queue_of_the_process(lock_path):
    """Two tasks wait for a lock this process holds, each on a helper thread
    in the library's in-process queue; the one at the front (the higher
    priority) is cancelled. Its wait ends, and the other is served once the
    lock is released: the cancelled one is no longer in line ahead of it."""
    import asyncio

    first = offload_lock.lock(lock_path).acquire()
    cancelled_out = threading.Event()
    released = threading.Event()
    entered = []
    box = {}

    def helpers():
        return {t.native_id for t in threading.enumerate() if t.name == "offload_lock async wait"}

    async def main():
        async def waiter(name, priority):
            async with offload_lock.lock_async(lock_path, priority=priority, wait=30, label=name):
                entered.append(name)

        front = asyncio.ensure_future(waiter("front", 50))
        while not (len(helpers()) == 1 and all(_asleep_in_queue(i) for i in helpers())):
            await asyncio.sleep(0.005)
        behind = asyncio.ensure_future(waiter("behind", 0))
        while not (len(helpers()) == 2 and all(_asleep_in_queue(i) for i in helpers())):
            await asyncio.sleep(0.005)
        front.cancel()
        # The task's cleanup waits for its helper thread, which the cancel
        # descriptor has to get out of the library's queue.
        with pytest.raises(asyncio.CancelledError):
            await front
        cancelled_out.set()
        await asyncio.get_running_loop().run_in_executor(None, released.wait, 30)
        await behind

    def run():
        try:
            asyncio.run(main())
        except BaseException as e:
            box["e"] = e

    loop_thread = threading.Thread(target=run, daemon=True)
    loop_thread.start()
    try:
        # Generous bounds: they catch a hang on a loaded machine, they do not time anything.
        assert cancelled_out.wait(30), box.get("e") or "the cancelled wait did not end"
        assert entered == []
    finally:
        first.release()
        released.set()
    loop_thread.join(30)
    assert not loop_thread.is_alive(), "the remaining waiter was never served"
    if "e" in box:
        raise box["e"]
    assert entered == ["behind"]
    assert offload_lock.waiters(lock_path) == []
    assert not offload_lock.inspect(lock_path)["held"]


def test_expect_and_priority_show_in_cli_status(lock_path):
    with offload_lock.lock(lock_path, expect=timedelta(minutes=10), priority="interactive", label="py-expect") as h:
        cli = cli_status(lock_path)
        mine = offload_lock.inspect(lock_path)
        assert h.yield_requested() is False
    assert cli["label"] == "py-expect" and cli["expectMs"] == 600000 and cli["priority"] == 10
    assert 0 < cli["freeInMs"] <= 600000 and cli["yieldRequested"] is None
    assert list(mine) == list(cli)
    for key in ("expectMs", "priority", "yieldRequested"):
        assert mine[key] == cli[key], key
    assert abs(mine["freeInMs"] - cli["freeInMs"]) < 5000
    # Seconds as a float; the slot's dictionary carries the same keys.
    with offload_lock.lock(lock_path, expect=1.5):
        cli = cli_status(lock_path)
        assert cli["expectMs"] == 1500 and cli["priority"] == 0
        assert offload_lock.inspect(lock_path)["slots"][0]["expectMs"] == 1500
    free = offload_lock.inspect(lock_path)
    assert (free["priority"], free["expectMs"], free["freeInMs"]) == (None, None, 0)


def test_waiters_eta_follows_the_declared_durations(lock_path, tmp_path):
    record = tmp_path / "order"
    procs = []
    with offload_lock.lock(lock_path, expect=60):
        try:
            # Python waiters declaring 20 s and nothing: the first's ETA is
            # the holder's free time, the second's 20 s later, the third's
            # unknown (the second declared nothing).
            code = PY_WAITER.replace("priority=priority)", "priority=priority, expect=EXPECT)")
            for k, expect in enumerate(["20", "None", "5"]):
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", code.replace("EXPECT", expect), lock_path, f"w{k}", "0", str(record)],
                    env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                ))
                wait_until(lambda: len(offload_lock.waiters(lock_path)) == k + 1, what=f"w{k} queued")
            ws = offload_lock.waiters(lock_path)
            assert [w["expectMs"] for w in ws] == [20000, None, 5000]
            assert 0 < ws[0]["etaMs"] <= 60000
            assert ws[1]["etaMs"] == ws[0]["etaMs"] + 20000
            assert ws[2]["etaMs"] is None
            cli = cli_status(lock_path)["waiters"]
            assert [w["etaMs"] is None for w in cli] == [False, False, True]
            assert abs(cli[1]["etaMs"] - ws[1]["etaMs"]) < 5000
        except BaseException:
            for p in procs:
                p.kill()
            raise
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err


def test_on_yield_called_once_for_a_cli_waiter_of_higher_priority(lock_path, tmp_path):
    record = tmp_path / "order"
    calls = []
    asked = threading.Event()

    def on_yield(request):
        calls.append(request)
        asked.set()

    procs = []
    with offload_lock.lock(lock_path, label="py-batch", priority="batch", on_yield=on_yield) as h:
        try:
            # Same priority as ours is no reason to make way.
            procs.append(cli_waiter(lock_path, "cli-batch", -10, record))
            wait_until(lambda: len(offload_lock.waiters(lock_path)) == 1, what="cli-batch queued")
            assert not asked.wait(0.3) and not h.yield_requested()
            assert offload_lock.inspect(lock_path)["yieldRequested"] is None
            urgent = cli_waiter(lock_path, "llm-eval", 10, record)
            procs.append(urgent)
            assert asked.wait(10), "on_yield was not called"
            assert calls == [{"pid": urgent.pid, "label": "llm-eval", "priority": 10}]
            assert h.yield_requested() is True
            want = {"pid": urgent.pid, "label": "llm-eval", "priority": 10}
            assert offload_lock.inspect(lock_path)["yieldRequested"] == want
            assert cli_status(lock_path)["yieldRequested"] == want
            # A second, higher waiter asks nothing more: once per hold.
            procs.append(cli_waiter(lock_path, "cli-top", 20, record))
            wait_until(lambda: len(offload_lock.waiters(lock_path)) == 3, what="cli-top queued")
            wait_until(lambda: cli_status(lock_path)["yieldRequested"]["label"] == "cli-top", what="status names cli-top")
            assert len(calls) == 1
        except BaseException:
            for p in procs:
                p.kill()
            raise
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert record.read_text().split() == ["cli-top", "llm-eval", "cli-batch"]
    assert len(calls) == 1


def test_a_holder_without_on_yield_is_not_asked(lock_path, tmp_path):
    with offload_lock.lock(lock_path, priority="batch") as h:
        p = cli_waiter(lock_path, "llm-eval", 10, tmp_path / "order")
        wait_until(lambda: len(offload_lock.waiters(lock_path)) == 1, what="llm-eval queued")
        assert not h.yield_requested()
        assert offload_lock.inspect(lock_path)["yieldRequested"] is None
    p.communicate(timeout=60)
    assert p.returncode == 0


def test_progress_gives_the_queue_position(lock_path):
    seen = []
    holder = cli_holder(lock_path)
    try:
        with pytest.raises(offload_lock.Timeout):
            offload_lock.lock(lock_path, wait="300ms", on_progress=seen.append).acquire()
    finally:
        holder.stop()
    assert seen and seen[0].changed
    assert seen[-1].position == 1


def test_the_pytest_marker_takes_priority_and_expect(lock_path, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_marked.py").write_text(textwrap.dedent(
        """
        import pytest, offload_lock

        @pytest.mark.gpu(priority="interactive", expect=90)
        def test_holds_with_priority(gpu_lock):
            i = offload_lock.inspect(gpu_lock.path)
            assert i["priority"] == 10 and i["expectMs"] == 90000
        """
    ))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-lock", lock_path,
         "--rootdir", str(suite), str(suite)],
        capture_output=True, text=True, env=_clean_env(), timeout=120, cwd=str(suite),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
