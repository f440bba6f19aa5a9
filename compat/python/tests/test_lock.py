"""lock(): taking, waiting, outcomes, nesting, release on exception and at
exit, and contention with the CLI, Node and other Python processes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import offload_lock
from conftest import CLI, cli_holder, cpp_holder, node_holder, py_holder, run_py, wait_until


def test_take_inspect_release(lock_path):
    with offload_lock.lock(lock_path, label="py-job") as h:
        assert h.path == lock_path and len(h.token) == 32 and h.gpu == 0
        assert not h.nested and not h.inherited and h.still_held()
        i = offload_lock.inspect(lock_path)
        assert i["held"] and i["pid"] == os.getpid() and i["label"] == "py-job" and i["token"] == h.token
    assert not os.path.exists(lock_path)
    assert not h.still_held()
    assert offload_lock.inspect(lock_path)["held"] is False


def test_inspect_has_the_cli_json_keys(lock_path):
    with offload_lock.lock(lock_path, label="keys"):
        mine = offload_lock.inspect(lock_path)
        cli = json.loads(subprocess.run([CLI, "--lock", lock_path, "--json", "status"], capture_output=True, text=True).stdout)
    assert list(mine) == list(cli)
    assert list(mine["slots"][0]) == list(cli["slots"][0])
    for k in ("path", "held", "pid", "startedAt", "label", "host", "token", "stale", "ownerUid", "gpu"):
        assert mine[k] == cli[k], k
    assert abs(mine["heldForMs"] - cli["heldForMs"]) < 5000


def test_default_path_follows_gpu_lock(monkeypatch, lock_path):
    monkeypatch.setenv("GPU_LOCK", lock_path)
    assert offload_lock.default_path() == lock_path
    with offload_lock.lock() as h:
        assert h.path == lock_path
    monkeypatch.delenv("GPU_LOCK")
    monkeypatch.setenv("TMPDIR", "/var/tmp/")
    assert offload_lock.default_path() == "/var/tmp/local-offload-gpu.lock"


def test_busy_and_timeout_name_the_holder(lock_path):
    holder = cli_holder(lock_path, label="render-video")
    try:
        with pytest.raises(offload_lock.Busy) as busy:
            with offload_lock.lock(lock_path, wait=0):
                pytest.fail("took a held lock")
        assert isinstance(busy.value, offload_lock.LockError)
        assert "held by render-video (pid %d" % holder.pid in str(busy.value)
        assert busy.value.path == lock_path
        t0 = time.monotonic()
        with pytest.raises(offload_lock.Timeout) as timeout:
            offload_lock.lock(lock_path, wait="300ms").acquire()
        assert time.monotonic() - t0 >= 0.29
        assert isinstance(timeout.value, TimeoutError) and isinstance(timeout.value, offload_lock.LockError)
        assert str(timeout.value).startswith("timed out: ") and "render-video" in str(timeout.value)
    finally:
        assert holder.stop() == 0


def test_a_decorated_function_holds_the_lock_per_call(lock_path):
    seen = []

    @offload_lock.lock(lock_path, label="decorated")
    def work(x):
        seen.append(offload_lock.inspect(lock_path)["label"])
        return x * 2

    assert work(21) == 42 and work(1) == 2
    assert seen == ["decorated", "decorated"]
    assert not os.path.exists(lock_path)


def test_exception_inside_the_block_releases(lock_path):
    with pytest.raises(ZeroDivisionError):
        with offload_lock.lock(lock_path):
            assert os.path.exists(lock_path)
            1 / 0
    assert not os.path.exists(lock_path)
    assert "OFFLOAD_LOCK_TOKEN" not in os.environ


def test_nested_with_passes_straight_through(lock_path):
    outer = offload_lock.lock(lock_path, wait=0)
    with outer as a:
        with offload_lock.lock(lock_path, wait=0) as b:
            assert b.nested and b.token == a.token
            with outer as c:  # the same Lock object, re-entered
                assert c.nested
        assert a.still_held()
    assert not os.path.exists(lock_path)


def test_threads_of_one_process_take_turns(lock_path):
    inside = []
    order = []
    overlap = []

    def worker(n):
        with offload_lock.lock(lock_path):
            inside.append(n)
            if len(inside) > 1:
                overlap.append(list(inside))
            order.append(n)
            time.sleep(0.02)
            inside.remove(n)

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert sorted(order) == list(range(6)) and not overlap


def test_another_thread_times_out_on_this_process_holder(lock_path):
    box = {}
    with offload_lock.lock(lock_path, label="main"):
        def other():
            try:
                offload_lock.lock(lock_path, wait=0.2).acquire()
            except Exception as e:
                box["e"] = e
        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        with pytest.raises(offload_lock.Busy):
            threading_result = []
            def try_once():
                try:
                    offload_lock.lock(lock_path, wait=0).acquire()
                except Exception as e:
                    threading_result.append(e)
            t2 = threading.Thread(target=try_once)
            t2.start()
            t2.join(10)
            raise threading_result[0]
    assert isinstance(box["e"], offload_lock.Timeout)
    assert "held by main (pid %d" % os.getpid() in str(box["e"])


@pytest.mark.parametrize("kind", ["cli", "node", "cpp", "python"])
def test_waits_for_another_process_and_takes_over_on_release(lock_path, kind):
    holder = {"cli": cli_holder, "node": node_holder, "cpp": cpp_holder, "python": py_holder}[kind](lock_path)
    box = {}

    def waiter():
        with offload_lock.lock(lock_path, wait=30, label="py-waiter"):
            box["at"] = time.monotonic()
            box["pid"] = offload_lock.inspect(lock_path)["pid"]

    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: offload_lock.waiters(lock_path), what="the waiter to register")
    assert offload_lock.waiters(lock_path)[0]["label"] == "py-waiter"
    assert "at" not in box
    released = time.monotonic()
    assert holder.stop() == 0
    t.join(30)
    assert box["pid"] == os.getpid()
    assert box["at"] - released < 1.0
    assert offload_lock.waiters(lock_path) == []


@pytest.mark.parametrize("kind", ["cli", "node", "cpp"])
def test_other_processes_wait_for_a_python_holder(lock_path, kind):
    with offload_lock.lock(lock_path, label="py-holder"):
        if kind == "cpp":
            from conftest import CPP_PARTICIPANT
            env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_LOCK_")}
            r = subprocess.run([CPP_PARTICIPANT, "hold", "--lock", lock_path, "--wait-ms", "0"], capture_output=True,
                               text=True, env=env, stdin=subprocess.DEVNULL)
            assert r.returncode == 1 and r.stdout.splitlines()[-1] == "busy"
            p = subprocess.Popen([CPP_PARTICIPANT, "hold", "--lock", lock_path, "--wait-ms", "30000"], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        elif kind == "cli":
            r = subprocess.run([CLI, "--lock", lock_path, "run", "--wait", "0", "--", "true"], capture_output=True, text=True,
                               env={k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_LOCK_")})
            assert r.returncode == 1 and "held by py-holder" in r.stderr
            p = subprocess.Popen([CLI, "--lock", lock_path, "--quiet", "run", "--wait", "30", "--", "true"],
                                 env={k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_LOCK_")})
        else:
            from conftest import NODE_HOLD, NODE_INDEX
            env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_LOCK_")}
            env["OFFLOAD_LOCK_BIN"] = CLI
            r = subprocess.run(["node", "--input-type=module", "-e", NODE_HOLD % (json.dumps(NODE_INDEX), "0"), lock_path],
                               capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
            assert r.stdout.strip() == "busy"
            p = subprocess.Popen(["node", "--input-type=module", "-e", NODE_HOLD % (json.dumps(NODE_INDEX), "30000"), lock_path],
                                 env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        assert p.poll() is None  # still waiting
    assert p.wait(30) == 0


def test_a_sigkilled_python_holder_is_taken_over_at_once(lock_path):
    holder = py_holder(lock_path)
    box = {}

    def waiter():
        with offload_lock.lock(lock_path, wait=30):
            box["at"] = time.monotonic()

    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: offload_lock.waiters(lock_path), what="the waiter to register")
    killed = time.monotonic()
    holder.kill()
    t.join(30)
    assert box["at"] - killed < 0.5


def test_released_at_interpreter_exit(lock_path):
    r = run_py("import sys, offload_lock\nh = offload_lock.lock(sys.argv[1]).acquire()\nprint(h.token)", lock_path)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(lock_path)  # removed, not merely stale


def test_a_dropped_handle_releases(lock_path):
    h = offload_lock.lock(lock_path).acquire()
    del h
    import gc

    gc.collect()
    assert not os.path.exists(lock_path)


def test_release_says_false_when_the_lock_was_taken_away(lock_path, tmp_path):
    lost = []
    got = threading.Event()

    def on_lost(message):
        lost.append(message)
        got.set()

    h = offload_lock.lock(lock_path, on_lost=on_lost).acquire()
    os.rename(lock_path, str(tmp_path / "moved"))
    assert got.wait(5)
    assert lock_path in lost[0]
    assert not h.still_held()
    assert h.release() is False
    assert h.release() is True  # once only


def test_on_progress_reports_the_holder(lock_path):
    holder = cli_holder(lock_path, label="render-video")
    seen = []
    try:
        with pytest.raises(offload_lock.Timeout):
            offload_lock.lock(lock_path, wait=1.2, on_progress=seen.append).acquire()
    finally:
        holder.stop()
    assert seen and seen[0].changed and seen[0].holders[0]["label"] == "render-video"
    assert seen[0].holders[0]["pid"] == holder.pid
    assert any(not p.changed for p in seen)  # the one-second tick


def test_the_wait_line_on_a_terminal(lock_path):
    import pty

    holder = cli_holder(lock_path, label="render-video")
    try:
        code = "import sys, offload_lock\ntry:\n offload_lock.lock(sys.argv[1], wait=1.5).acquire()\nexcept offload_lock.Timeout: pass\n"
        master, slave = pty.openpty()
        p = subprocess.Popen([sys.executable, "-c", code, lock_path], stderr=slave, stdout=subprocess.DEVNULL)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        p.wait(10)
        os.close(master)
    finally:
        holder.stop()
    text = out.decode()
    assert "\r\x1b[Koffload-lock: waiting " in text and "for render-video (pid %d" % holder.pid in text
    assert text.endswith("\r\x1b[K")  # cleared when the wait ended


def test_system_failures_are_oserrors_with_errno_and_path(tmp_path):
    missing = str(tmp_path / "no" / "such" / "gpu.lock")
    with pytest.raises(FileNotFoundError) as e:
        offload_lock.lock(missing, wait=0).acquire()
    assert e.value.errno == errno.ENOENT and e.value.filename == missing
    f = tmp_path / "file.lock"
    f.write_text("x")
    with pytest.raises(NotADirectoryError) as e:
        offload_lock.lock(str(f), wait=0).acquire()
    assert "not a directory" in str(e.value) and f.read_text() == "x"


def test_gpu_slots(lock_path):
    holder = cli_holder(lock_path)
    try:
        with offload_lock.lock(lock_path, gpus=2, wait=0) as h:
            assert h.gpu == 1 and h.path == lock_path + ".gpu1"
            with pytest.raises(offload_lock.Busy) as e:
                run = threading.Thread  # another thread: this one's pass through
                box = []
                t = run(target=lambda: box.append(_try(lambda: offload_lock.lock(lock_path, gpus=2, wait=0).acquire())))
                t.start()
                t.join(10)
                raise box[0]
            assert "all 2 GPU slots" in str(e.value)
        with offload_lock.lock(lock_path, gpu=1, wait=0) as h:
            assert h.gpu == 1
    finally:
        holder.stop()


def test_gpu_slots_follow_cuda_visible_devices_as_the_command_does(lock_path, monkeypatch):
    holder = cli_holder(lock_path)  # slot 0
    try:
        # 2 and 0 allowed, 0 held: slot 2, never the free slot 1.
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
        with offload_lock.lock(lock_path, gpus=3, wait=0) as h:
            assert h.gpu == 2 and h.path == lock_path + ".gpu2"
        with pytest.raises(offload_lock.Busy):
            offload_lock.lock(lock_path, gpus=3, gpu=0, wait=0).acquire()
        # One allowed: that slot, as `run --gpus 2` under the same value.
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        with offload_lock.lock(lock_path, gpus=2, wait=0) as h:
            assert h.gpu == 1
        cli = subprocess.run([CLI, "--lock", lock_path, "run", "--gpus", "2", "--wait", "0", "--", "sh", "-c",
                              'echo "$OFFLOAD_LOCK_GPU"'], capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0 and cli.stdout.strip() == "1", cli.stderr
        # None of the slots: refused before any wait, in the command's words.
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
        with pytest.raises(ValueError, match=r"CUDA_VISIBLE_DEVICES=5 allows GPU 5, none of the 2 GPU slots"):
            offload_lock.lock(lock_path, gpus=2)
        with pytest.raises(ValueError, match=r"--gpu 0 is outside CUDA_VISIBLE_DEVICES=5"):
            offload_lock.lock(lock_path, gpus=2, gpu=0)
        # Named by the caller instead: exactly those, checked by the library.
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        with offload_lock.lock(lock_path, gpus=3, allowed_gpus=[0, 2], wait=0) as h:
            assert h.gpu == 2
        with pytest.raises(ValueError, match="allowed_gpus"):
            offload_lock.lock(lock_path, gpus=3, allowed_gpus="02")
        with pytest.raises(Exception, match="allowed"):
            offload_lock.lock(lock_path, gpus=3, allowed_gpus=[0, 7], wait=0).acquire()
    finally:
        holder.stop()


def _try(fn):
    try:
        return fn()
    except Exception as e:
        return e


def test_options_are_checked():
    for bad in (101, -101, "urgent", 1.5, True, "10.5"):
        with pytest.raises(ValueError, match="priority") as e:
            offload_lock.lock(priority=bad)
        assert repr(bad) in str(e.value)
    for bad in (0, -1, "soon", "forever"):
        with pytest.raises(ValueError, match="expect"):
            offload_lock.lock(expect=bad)
    pr = offload_lock.parse_priority
    assert (pr(None), pr("batch"), pr("normal"), pr("interactive"), pr(-100), pr("100"), pr("-7")) == (
        0, -10, 0, 10, -100, 100, -7
    )
    # The command's grammar, refused as `offload-lock run --priority` refuses it.
    for bad in ("+5", " 7", "7 ", "Batch", "007x"):
        with pytest.raises(ValueError, match="priority"):
            pr(bad)
    with pytest.raises(ValueError):
        offload_lock.lock(wait=-1)
    with pytest.raises(ValueError):
        offload_lock.lock(wait="soon")
    with pytest.raises(TypeError):
        offload_lock.lock(wait=True)
    with pytest.raises(ValueError):
        offload_lock.lock(gpus=0)
    with pytest.raises(ValueError):
        offload_lock.lock(gpus=2, gpu=2)
    with pytest.raises(ValueError):
        offload_lock.lock(ttl=0)
    p = offload_lock.parse_duration
    assert p(None) is None and p("forever") is None and p(0) == 0 and p("0") == 0
    assert p("1.5") == 1.5 and p("500ms") == 0.5 and p("42s") == 42 and p("5m") == 300 and p("2h") == 7200
