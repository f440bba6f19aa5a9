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
  does not get the lock in time fails with offload_lock.Timeout.
- ``--gpu-lock PATH`` names the lock (default: ``$GPU_LOCK``, else
  ``<tmpdir>/local-offload-gpu.lock``, as every participant resolves it).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import pytest

from . import Handle, lock, parse_duration

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


def _lock_for(item: Any, extra: Dict[str, Any]) -> Any:
    config = item.config
    kwargs: Dict[str, Any] = {
        "wait": config.getoption("--gpu-lock-wait"),
        "label": f"pytest {item.nodeid}"[:200],
        "quiet": True,
    }
    kwargs.update(extra)
    return lock(config.getoption("--gpu-lock"), **kwargs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    marker = item.get_closest_marker("gpu")
    if marker is None:
        yield
        return
    held = _lock_for(item, dict(marker.kwargs))
    # Taken here, around setup, call and teardown; an error taking it is
    # reported as the test's failure by the setup hook below.
    try:
        handle = held.__enter__()
    except Exception as e:  # Timeout, OSError
        item._offload_lock_error = e
        yield
        return
    try:
        item._offload_lock_handle = handle
        yield
    finally:
        held.__exit__(None, None, None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Any) -> None:
    err = getattr(item, "_offload_lock_error", None)
    if err is not None:
        raise err


@pytest.fixture
def gpu_lock(request: Any) -> Iterator[Handle]:
    """The machine-wide GPU lock, held for this test; yields its Handle."""
    with _lock_for(request.node, {}) as h:
        yield h
