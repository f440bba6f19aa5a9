"""The gpulease lease from Python (offload_lock.find_lease, inspect_lease),
against a real gpulease participant (the stand-in, tests/interop/gpulease)
and agreeing with ``offload-lock --json status``."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

import offload_lock
from conftest import CLI, Holder

STANDIN = os.path.join(os.path.dirname(CLI), "gpulease-standin")

pytestmark = pytest.mark.skipif(not os.path.exists(STANDIN), reason="gpulease-standin is not built")


def standin_holder(root: str, cls: str = "text") -> Holder:
    return Holder([STANDIN, "hold", "-state-dir", root, "-class", cls, "-reason", "py-test", "-window", "10m"], "waiting ")


def cli_lease(root: str, lock: str) -> dict:
    env = dict(os.environ, OFFLOAD_LOCK_LEASE_ROOT=root)
    env.pop("GPU_LOCK", None)
    out = subprocess.run([CLI, "--lock", lock, "--json", "status"], env=env, capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout)["gpulease"]


def _timeless(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("heldForMs", "rule")}


def test_find_lease_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_LOCK", raising=False)
    monkeypatch.setenv("OFFLOAD_LOCK_LEASE_ROOT", str(tmp_path))
    p = offload_lock.find_lease()
    assert p["dir"] == str(tmp_path / "gpu" / "lease")
    assert p["gpuDir"] == str(tmp_path / "gpu")
    assert p["rule"] == "OFFLOAD_LOCK_LEASE_ROOT"
    assert p["exists"] is True
    monkeypatch.setenv("OFFLOAD_LOCK_LEASE_ROOT", str(tmp_path / "absent"))
    assert offload_lock.find_lease()["exists"] is False
    monkeypatch.setenv("GPU_LOCK", str(tmp_path / "gpu.lock"))
    p = offload_lock.find_lease()
    assert (p["dir"], p["gpuDir"], p["rule"]) == (str(tmp_path / "gpu.lock"), str(tmp_path), "GPU_LOCK")
    # GPU_LOCK names a gpulease lease only once gpulease's counter is beside it.
    assert p["exists"] is False
    (tmp_path / "epoch").write_text("1")
    assert offload_lock.find_lease()["exists"] is True


def test_inspect_lease_names_a_gpulease_holder_as_the_command_does(tmp_path):
    root = str(tmp_path)
    lock = str(tmp_path / "gpu.lock")
    lease_dir = str(tmp_path / "gpu" / "lease")
    h = standin_holder(root)
    try:
        line = h.proc.stdout.readline()
        assert line.startswith("acquired "), line
        epoch = int(line.split()[2])
        got = offload_lock.inspect_lease(lease_dir)
        assert got["state"] == "held" and got["held"] is True
        assert (got["pid"], got["class"], got["epoch"], got["reason"]) == (h.pid, "text", epoch, "py-test")
        assert got["gpuleaseReadersHeld"] is True
        assert got["counter"] == epoch
        cli = cli_lease(root, lock)
        assert _timeless(cli) == _timeless(got)
    finally:
        h.proc.send_signal(signal.SIGKILL)
        h.proc.wait(10)
    # Killed: its holder is provably gone, so the lease is stale to both; nothing is taken over by looking.
    got = offload_lock.inspect_lease(lease_dir)
    assert got["state"] == "stale" and "gone" in got["why"]
    assert cli_lease(root, lock)["state"] == "stale"
    assert os.path.exists(os.path.join(lease_dir, "meta.json"))


def test_inspect_lease_free_and_unknown(tmp_path):
    lease_dir = tmp_path / "gpu" / "lease"
    assert offload_lock.inspect_lease(str(lease_dir))["state"] == "free"
    lease_dir.mkdir(parents=True)
    (tmp_path / "elsewhere").write_text("{}")
    os.symlink(tmp_path / "elsewhere", lease_dir / "meta.json")
    got = offload_lock.inspect_lease(str(lease_dir))
    assert got["state"] == "unknown" and got["pid"] is None
    assert cli_lease(str(tmp_path), str(tmp_path / "gpu.lock"))["state"] == "unknown"


def test_inspect_carries_the_lease_as_status_does(tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_LOCK", raising=False)
    monkeypatch.setenv("OFFLOAD_LOCK_LEASE_ROOT", str(tmp_path))
    lock = str(tmp_path / "gpu.lock")
    h = standin_holder(str(tmp_path), cls="media")
    try:
        assert h.proc.stdout.readline().startswith("acquired ")
        mine = offload_lock.inspect(lock)["gpulease"]
        cli = cli_lease(str(tmp_path), lock)
        assert list(mine) == list(cli)
        assert (mine["rule"], mine["state"], mine["pid"], mine["class"]) == ("OFFLOAD_LOCK_LEASE_ROOT", "held", h.pid, "media")
    finally:
        h.stop()
    monkeypatch.setenv("OFFLOAD_LOCK_LEASE_ROOT", str(tmp_path / "absent"))
    assert offload_lock.inspect(lock)["gpulease"] is None


def test_inspect_calls_the_gpu_busy_while_a_gpulease_holder_has_it(tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_LOCK", raising=False)
    monkeypatch.setenv("OFFLOAD_LOCK_LEASE_ROOT", str(tmp_path))
    lock = str(tmp_path / "gpu.lock")
    assert offload_lock.joined_lease() == (offload_lock.inspect_lease(str(tmp_path / "gpu" / "lease")), False)
    h = standin_holder(str(tmp_path), cls="media")
    try:
        assert h.proc.stdout.readline().startswith("acquired ")
        mine = offload_lock.inspect(lock)
        assert (mine["held"], mine["busy"], mine["busyBy"]) == (False, True, "gpulease")
        assert (mine["slots"][0]["busy"], mine["slots"][0]["busyBy"]) == (True, "gpulease")
        lease, busy = offload_lock.joined_lease()
        assert busy is True and lease["pid"] == h.pid
        env = dict(os.environ)
        cli = json.loads(subprocess.run([CLI, "--lock", lock, "--json", "status"], env=env, capture_output=True,
                                        text=True, timeout=30).stdout)
        assert (cli["busy"], cli["busyBy"]) == (mine["busy"], mine["busyBy"])
    finally:
        h.stop()
    mine = offload_lock.inspect(lock)
    assert (mine["busy"], mine["busyBy"]) == (False, None)
    # GPU_LOCK places the lease in a directory both protocols would share:
    # acquisitions take none, and the GPU is not busy by it.
    monkeypatch.setenv("GPU_LOCK", lock)
    assert offload_lock.joined_lease() == (None, False)


def test_a_lock_that_waits_for_the_gpulease_lease_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_LOCK", raising=False)
    monkeypatch.setenv("OFFLOAD_LOCK_LEASE_ROOT", str(tmp_path))
    lock = str(tmp_path / "gpu.lock")
    seen = []
    h = standin_holder(str(tmp_path), cls="media")
    try:
        assert h.proc.stdout.readline().startswith("acquired ")
        with pytest.raises(offload_lock.Timeout):
            with offload_lock.lock(lock, wait=1.5, quiet=True, on_progress=seen.append):
                pass
    finally:
        h.stop()
    # The lock was taken and the lease waited for: the words name the lease's holder.
    assert seen, "no progress while the lease was waited for"
    assert seen[0].holders == []
    assert seen[0].text.startswith(f"the gpulease lease: media lease (pid {h.pid}, epoch "), seen[0].text
