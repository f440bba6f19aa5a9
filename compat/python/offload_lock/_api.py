"""lock() and lock_async(): the package's entry points, and the contract of
every option (Lock in _lock.py does the work)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Sequence, Union

from ._lock import Lock
from ._wait_line import WaitProgress
from ._words import Duration


def lock(
    path: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    wait: Duration = None,
    label: Optional[str] = None,
    ttl: Duration = None,
    gpus: Optional[Union[int, str]] = None,
    gpu: Optional[int] = None,
    allowed_gpus: Optional[Sequence[int]] = None,
    priority: Union[None, int, str] = None,
    expect: Duration = None,
    quiet: Optional[bool] = None,
    on_lost: Optional[Callable[[str], None]] = None,
    on_progress: Optional[Callable[[WaitProgress], None]] = None,
    on_yield: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Lock:
    """The machine-wide GPU lock, as a context manager and a decorator.

    ``path``: the lock directory; None: ``default_path()`` (``$GPU_LOCK``,
    else ``<tmpdir>/local-offload-gpu.lock``, the Node runners' rule),
    resolved at each acquisition. ``wait``: None (forever), 0 (try once),
    seconds, a timedelta or a DUR string as the CLI takes it (``"30m"``).
    ``label``: what holds it, shown by ``offload-lock status`` (default: the
    program's name). ``ttl``: how old another holder's meta.json may be
    before it counts as stale (default 1h). ``gpus=N`` (or ``"auto"``):
    take the first free of N GPU slots; ``gpu=K``: slot K only; the
    Handle's ``gpu`` says which. As the command does, a set
    ``CUDA_VISIBLE_DEVICES`` limits them to the slots of the GPUs it names
    (slot k is GPU k: one named is that slot; a list naming none of them
    is a ValueError); ``allowed_gpus=[...]`` names the slots instead.
    ``quiet``: None shows the CLI's wait line when stderr is a terminal,
    False shows it always, True never.
    ``on_progress(WaitProgress)``: called from a helper thread while
    waiting for another process, when the holder changes and every second.
    ``on_lost(message)``: called on a thread of its own as soon as someone
    else removes or replaces the lock while it is held.

    The queue: waiters of one lock (or one GPU slot) are served by
    ``priority``, highest first, then by arrival, whatever their language
    (the CLI's ``--priority``, the C++ library, Node, other Python
    processes, and the threads of this one). ``priority``: an integer from
    -100 to 100, or ``"batch"`` (-10), ``"normal"`` (0, the default) or
    ``"interactive"`` (10); anything else raises ValueError. Waits among
    several GPU slots (``gpus=N`` without ``gpu``) are not ordered.
    ``expect``: how long the hold should last (seconds, a timedelta or a
    DUR string), shown to others as ``expectMs`` and used for the ETAs of
    the waiters behind it; advisory, nothing happens when it passes.
    ``on_yield(request)``: this holder can make way. Called once per hold
    when a waiter of a higher priority queues, with that waiter's ``pid``,
    ``label`` and ``priority`` (a dict); afterwards the Handle's
    ``yield_requested()`` is True. It runs on the library's heartbeat
    thread (shared by every lock of the process), so it must return quickly
    and be thread-safe: set a flag or an Event and let the holder release
    from its own thread (and take the lock again if it has more to do: it
    then queues behind the waiter it made way for). Exceptions it raises
    are printed and otherwise ignored.

    Entering blocks until the lock is held, and raises Busy (wait 0),
    Timeout, OSError for system failures, KeyboardInterrupt on Ctrl-C
    (within milliseconds; nothing left behind). Leaving releases, also on
    an exception. A nested ``with`` of the same lock in the same thread or
    asyncio task passes straight through; so do child processes started
    while it is held (subprocess, multiprocessing spawn and fork,
    ProcessPoolExecutor), which never release it. The lock is released at
    interpreter exit and is stale at once when the process dies.
    """
    return Lock(
        path,
        wait=wait,
        label=label,
        ttl=ttl,
        gpus=gpus,
        gpu=gpu,
        allowed_gpus=allowed_gpus,
        priority=priority,
        expect=expect,
        quiet=quiet,
        on_lost=on_lost,
        on_progress=on_progress,
        on_yield=on_yield,
    )


def lock_async(
    path: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    wait: Duration = None,
    label: Optional[str] = None,
    ttl: Duration = None,
    gpus: Optional[Union[int, str]] = None,
    gpu: Optional[int] = None,
    allowed_gpus: Optional[Sequence[int]] = None,
    priority: Union[None, int, str] = None,
    expect: Duration = None,
    quiet: Optional[bool] = None,
    on_lost: Optional[Callable[[str], None]] = None,
    on_progress: Optional[Callable[[WaitProgress], None]] = None,
    on_yield: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Lock:
    """lock() for ``async with``: the same options and outcomes; the wait
    does not block the event loop, and cancelling the task ends it, leaving
    no lock and no waiter entry. Nesting is per asyncio task."""
    return lock(
        path,
        wait=wait,
        label=label,
        ttl=ttl,
        gpus=gpus,
        gpu=gpu,
        allowed_gpus=allowed_gpus,
        priority=priority,
        expect=expect,
        quiet=quiet,
        on_lost=on_lost,
        on_progress=on_progress,
        on_yield=on_yield,
    )


