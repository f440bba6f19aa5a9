"""A sample GPU test suite for test_pytest_plugin.py: marked tests (and one
using the gpu_lock fixture) must never overlap, anywhere; unmarked ones run
in parallel. Each test records its interval in $SAMPLE_RECORD."""

import os
import time

import pytest


def _record(kind, name, body):
    start = time.time()
    body()
    end = time.time()
    with open(os.path.join(os.environ["SAMPLE_RECORD"], f"{kind}-{name}-{os.getpid()}"), "w") as f:
        f.write(f"{kind} {name} {start!r} {end!r} {os.environ.get('PYTEST_XDIST_WORKER', '-')}\n")


@pytest.mark.gpu
@pytest.mark.parametrize("n", range(8))
def test_marked(n):
    _record("gpu", f"marked{n}", lambda: time.sleep(0.15))


def test_fixture(gpu_lock):
    assert gpu_lock.still_held()
    _record("gpu", "fixture", lambda: time.sleep(0.15))


@pytest.mark.parametrize("n", range(8))
def test_unmarked(n):
    _record("cpu", f"unmarked{n}", lambda: time.sleep(0.4))
