"""pytest plugin (entry point ``pytest11``): serialize GPU tests machine-wide.

Tests marked ``@pytest.mark.gpu`` hold the GPU lock from their setup to
their teardown, so no two of them run at once anywhere on the machine:
across pytest-xdist workers, across separate pytest runs, and against the
CLI, the C++ library, the Node runners and anything else that takes the
same lock. Unmarked tests are left alone and run in parallel as usual.

- ``@pytest.mark.gpu`` takes lock() keyword arguments too:
  ``@pytest.mark.gpu(gpus=2)``, ``@pytest.mark.gpu(gpu=1)``, and a place in
  the machine's queue: ``@pytest.mark.gpu(priority="interactive",
  expect=30)`` is served before batch jobs waiting for the GPU.
- The ``gpu_lock`` fixture holds the lock for one test and gives its
  Handle (``gpu_lock.gpu`` is the slot held); in a marked test it is the
  marker's lock, passed straight through.
- ``--gpu-lock-wait DUR`` bounds each wait (default: forever); a test that
  does not get the lock in time fails (not errors) with one line naming the
  holder: ``GPU lock: timed out: PATH is held by LABEL (pid N) for 5m12s``.
- A test waiting for the lock says so on the terminal (pytest's own
  reporter, not the captured output): a line when it starts to wait or the
  holder changes, and a reminder every 30 s, so a long wait never looks
  like a hang. (Under pytest-xdist the workers' terminals are not shown.)
- ``--gpu-lock PATH`` names the lock (default: ``$GPU_LOCK``, else
  ``<tmpdir>/local-offload-gpu.lock``, as every participant resolves it).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional

import pytest

from . import Handle, LockError, WaitProgress, lock, parse_duration

_HANDLE = pytest.StashKey[Optional[Handle]]() if hasattr(pytest, "StashKey") else None


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("offload_lock", "machine-wide GPU lock (offload-lock)")
    group.addoption(
        "--gpu-lock-wait",
        metavar="DUR",
        default=None,
        help="how long a @pytest.mark.gpu test waits for the GPU lock (0, 1.5, 500ms, 30s, 5m, forever; default forever)",
    )
    group.addoption(
        "--gpu-lock",
        metavar="PATH",
        default=None,
        help="the GPU lock directory (default: $GPU_LOCK, else <tmpdir>/local-offload-gpu.lock)",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "gpu(**lock_options): hold the machine-wide GPU lock (offload-lock) for the test's setup, call and teardown",
    )
    wait = config.getoption("--gpu-lock-wait")
    parse_duration(wait, what="--gpu-lock-wait")  # a bad value is a usage error at once
    if not config.pluginmanager.has_plugin("offload_lock_failures"):
        config.pluginmanager.register(_LockFailures(), "offload_lock_failures")


# How often a test still waiting for the lock says so on the terminal.
REMIND_EVERY_S = 30.0


def _announcer(item: Any) -> Optional[Callable[[WaitProgress], None]]:
    """The on_progress of a marked test: its wait on pytest's terminal
    reporter, outside the output pytest captures for the test."""
    config = item.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return None
    last = [float("-inf")]

    def announce(p: WaitProgress) -> None:
        if not p.changed and p.waited - last[0] < REMIND_EVERY_S:
            return
        last[0] = p.waited
        waited = "" if p.changed and p.waited < 1 else f" ({p.waited:.0f}s so far)"
        line = f"{item.nodeid}: waiting for the GPU lock: {p.text}{waited}"
        try:
            if capture is not None:
                with capture.global_and_fixture_disabled():
                    _write_line(reporter, line)
            else:
                _write_line(reporter, line)
        except Exception:
            pass  # a report must never break the wait

    return announce


def _write_line(reporter: Any, line: str) -> None:
    # On a line of its own, also after the progress letters of -q.
    tw = getattr(reporter, "_tw", None)
    if tw is not None and getattr(tw, "width_of_current_line", 0):
        reporter.write("\n")
    reporter.write_line(line)


def _lock_for(item: Any, extra: Dict[str, Any], announce: bool = False) -> Any:
    config = item.config
    kwargs: Dict[str, Any] = {
        "wait": config.getoption("--gpu-lock-wait"),
        "label": f"pytest {item.nodeid}"[:200],
        "quiet": True,
    }
    if announce:
        kwargs["on_progress"] = _announcer(item)
    kwargs.update(extra)
    return lock(config.getoption("--gpu-lock"), **kwargs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    marker = item.get_closest_marker("gpu")
    if marker is None:
        yield
        return
    held = _lock_for(item, dict(marker.kwargs), announce=True)
    # Taken here, around setup, call and teardown. A lock that cannot be
    # taken is the test's failure, reported by _report_lock_failure below
    # in place of running it.
    try:
        held.__enter__()
    except (LockError, OSError, ValueError) as e:
        item._offload_lock_error = e
        yield
        return
    try:
        yield
    finally:
        held.__exit__(None, None, None)


def _failure_line(err: BaseException) -> str:
    return f"GPU lock: {err}"


class _LockFailures:
    """A marked test whose lock could not be taken fails with one line
    naming the holder (the message of offload_lock.Timeout) in place of
    running: no setup error, no traceback of this package. A plugin object
    of its own (registered by pytest_configure), because this module's own
    pytest_runtest_protocol is the wrapper that holds the lock."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Optional[bool]:
        err = getattr(item, "_offload_lock_error", None)
        if err is None:
            return None
        from _pytest.reports import TestReport

        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        keywords = {k: 1 for k in item.keywords}
        report = TestReport(item.nodeid, item.location, keywords, "failed", _failure_line(err), "call", [], 0.0)
        ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


@pytest.fixture
def gpu_lock(request: Any) -> Iterator[Handle]:
    """The machine-wide GPU lock, held for this test; yields its Handle."""
    with _lock_for(request.node, {}) as h:
        yield h
