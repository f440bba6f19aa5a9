"""The pytest plugin: a pytest-xdist run (-n 4) of a sample suite in which
@pytest.mark.gpu tests (and a gpu_lock fixture user) never overlap, with
each other or with CLI holders running at the same time, while unmarked
tests do overlap."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

from conftest import CLI, HERE, cli_holder, py_env

SAMPLE = os.path.join(HERE, "xdist_sample")


def _overlaps(intervals):
    out = []
    s = sorted(intervals, key=lambda i: i[1])
    for a, b in zip(s, s[1:]):
        if b[1] < a[2]:
            out.append((a, b))
    return out


def _run_sample(lock_path, record, *extra):
    env = py_env()
    env["SAMPLE_RECORD"] = str(record)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "4", "--gpu-lock", lock_path,
         "--gpu-lock-wait", "60s", "--rootdir", SAMPLE, *extra, SAMPLE],
        capture_output=True, text=True, env=env, timeout=120, cwd=SAMPLE,
    )


def test_marked_tests_never_overlap_across_xdist_workers_and_the_cli(lock_path, tmp_path):
    record = tmp_path / "record"
    record.mkdir()
    cli_log = tmp_path / "cli.log"
    stop = threading.Event()

    def cli_participant():
        # The CLI takes the same lock now and then during the run.
        while not stop.is_set():
            subprocess.run([CLI, "--lock", lock_path, "--quiet", "run", "--", sys.executable, "-c",
                            "import time,sys; s=time.time(); time.sleep(0.1); open(sys.argv[1],'a').write(f'cli cli {s!r} {time.time()!r} -\\n')",
                            str(cli_log)], check=True, env={k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_LOCK_")})
            time.sleep(0.05)

    t = threading.Thread(target=cli_participant)
    t.start()
    try:
        r = _run_sample(lock_path, record)
    finally:
        stop.set()
        t.join(30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "17 passed" in r.stdout
    rows = [open(record / f).read().split() for f in os.listdir(record)]
    rows += [line.split() for line in cli_log.read_text().splitlines()]
    gpu = [(name, float(s), float(e), w) for kind, name, s, e, w in rows if kind in ("gpu", "cli")]
    cpu = [(name, float(s), float(e), w) for kind, name, s, e, w in rows if kind == "cpu"]
    assert len([g for g in gpu if g[0] != "cli"]) == 9 and len(cpu) == 8
    assert any(g[0] == "cli" for g in gpu)
    assert len({g[3] for g in gpu if g[0] != "cli"}) >= 2  # marked tests ran on several workers
    assert _overlaps(gpu) == []
    assert _overlaps(cpu)  # unmarked tests ran side by side
    assert not os.path.exists(lock_path)


def test_wait_option_bounds_the_wait(lock_path, tmp_path):
    record = tmp_path / "record"
    record.mkdir()
    holder = cli_holder(lock_path, label="render-video")
    try:
        env = py_env()
        env["SAMPLE_RECORD"] = str(record)
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-lock", lock_path,
             "--gpu-lock-wait", "200ms", "--rootdir", SAMPLE, SAMPLE + "/test_sample.py::test_marked"],
            capture_output=True, text=True, env=env, timeout=120, cwd=SAMPLE,
        )
    finally:
        holder.stop()
    assert r.returncode == 1
    out = r.stdout + r.stderr
    # Each marked test fails (not errors) with one line naming the holder,
    # as the command names it; no traceback, nothing of this package.
    assert "8 failed" in r.stdout and "error" not in out.lower(), out
    lines = [line for line in out.splitlines() if line.startswith("GPU lock: ")]
    assert len(lines) == 8, out
    for line in lines:
        assert re.fullmatch(r"GPU lock: timed out: \S+ is held by render-video \(pid \d+, host [^)]+\) for \w+", line), line
    assert "Traceback" not in out and "offload_lock/" not in out and "_native" not in out, out
    # A waiting test says so on the terminal reporter, not in the captured
    # output of the test.
    waiting = [line for line in out.splitlines() if ": waiting for the GPU lock: render-video (pid " in line]
    assert waiting and waiting[0].startswith("test_sample.py::test_marked["), out
    assert "Captured" not in out, out
    assert os.listdir(record) == []


def test_bad_wait_option_is_a_usage_error(lock_path):
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-lock-wait", "soon",
                        "--rootdir", SAMPLE, SAMPLE], capture_output=True, text=True, env=py_env(), timeout=60, cwd=SAMPLE)
    assert r.returncode != 0 and "soon" in (r.stdout + r.stderr)
