"""Looking at the lock without taking it: inspect(), waiters(),
default_path(), with the keys of ``offload-lock --json status``."""

from __future__ import annotations

import ctypes
import errno as _errno
import os
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _native as N
from ._lease import joined_lease, lease_board
from ._words import Duration, gpu_slot_path, parse_duration, slot_count


def default_path() -> str:
    """The lock path when none is given: ``$GPU_LOCK`` if not empty, else
    ``<tmpdir>/local-offload-gpu.lock`` with tmpdir the first non-empty of
    TMPDIR, TMP, TEMP, else /tmp (the Node runners' rule, the library's)."""
    return os.fsdecode(N.text_of(N.default_path))


def _s(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def info_dict(i: N.InfoEx) -> Dict[str, Any]:
    """One lock (or slot) with the keys of `offload-lock --json status`."""
    held = bool(i.held)
    return {
        "path": os.fsdecode(i.path),
        "held": held,
        "pid": i.pid if i.has_pid else None,
        "startedAt": i.started_at_ms if i.has_started_at else None,
        "heldForMs": i.held_for_ms if held else None,
        "label": _s(i.label) or None,
        "host": _s(i.host) or None,
        "token": _s(i.token) or None,
        "stale": _s(i.stale) if i.has_stale else None,
        "ownerUid": i.owner_uid if i.owner_uid >= 0 else None,
        "v1Stale": _s(i.v1_stale) if i.has_v1_stale else None,
        "otherPidNamespace": bool(i.other_pid_namespace),
    }


def queue_dict(q: N.QueueInfo, held: bool) -> Dict[str, Any]:
    """The holder's declarations and the queue's request, with the keys and
    the nulls of `offload-lock --json status`."""
    y = None
    if held and q.has_yield_request:
        y = {"pid": q.yield_pid, "label": _s(q.yield_label), "priority": q.yield_priority}
    return {
        "priority": q.priority if held else None,
        "expectMs": q.expect_ms if held and q.expect_ms > 0 else None,
        "freeInMs": (q.free_in_ms if q.free_in_ms >= 0 else None) if held else 0,
        "maxHoldMs": q.max_hold_ms if held and q.max_hold_ms > 0 else None,
        "maxHoldInMs": q.max_hold_in_ms if held and q.max_hold_ms > 0 else None,
        "idleSince": q.idle_since_ms if held and q.idle_since_ms > 0 else None,
        "idleForMs": q.idle_for_ms if held and q.idle_since_ms > 0 else None,
        "yieldRequested": y,
    }


def inspect_both(path: str, ttl_ms: int = 0) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """One inspection: the lock's keys and the queue's keys."""
    info = N.InfoEx()
    q = N.QueueInfo()
    q.size = ctypes.sizeof(q)
    rc = N.inspect_queue(os.fsencode(path), ttl_ms, ctypes.byref(info), ctypes.byref(q))
    if rc == N.ERROR:
        raise OSError(_errno.EIO, _s(info.problem), path)
    lock = info_dict(info)
    if path.startswith("etcd://"):
        # An etcd lock's fencing token, as `--json status` shows it.
        lock["fence"] = q.fence if info.held and q.fence else None
    return lock, queue_dict(q, bool(info.held))


def inspect_one(path: str, ttl_ms: int = 0) -> Dict[str, Any]:
    return inspect_both(path, ttl_ms)[0]


def token_holds(path: str, token: str) -> bool:
    """Whether the lock at `path` is held with `token` now."""
    try:
        i = inspect_one(path)
    except OSError:
        return False
    return bool(i["held"]) and i["token"] == token


def waiters(path: Optional[Union[str, "os.PathLike[str]"]] = None) -> List[Dict[str, Any]]:
    """The processes waiting for the lock in the order it serves them
    (priority, then arrival), as in ``offload-lock --json status``:
    ``pid``, ``label``, ``host``, ``since`` (epoch ms), ``waitedMs``,
    ``gpu`` (None: any slot), ``gpus``, ``position`` (1 = next in its
    slot's queue; None for a wait among several slots, which is not
    ordered), ``priority``, ``expectMs`` (None: undeclared) and ``etaMs``
    (the holder's expected free time plus the declared durations ahead of
    it; None as soon as one of them is undeclared). Dead waiters are left
    out. Never blocks."""
    p = os.fsencode(os.fspath(path)) if path is not None else None
    count = ctypes.c_size_t(0)
    n = 16
    while True:
        arr = (N.WaiterEx * n)()
        N.waiters_ex(p, arr, ctypes.sizeof(N.WaiterEx), n, ctypes.byref(count))
        if count.value <= n:
            break
        n = count.value + 8
    out = []
    for e in arr[: count.value]:
        w = e.waiter
        out.append(
            {
                "pid": w.pid,
                "label": _s(w.label) or None,
                "host": _s(w.host) or None,
                "since": w.since_ms,
                "waitedMs": w.waited_ms,
                "gpu": w.gpu if w.gpu >= 0 else None,
                "gpus": w.gpus,
                "position": e.position or None,
                "priority": e.priority,
                "expectMs": e.expect_ms or None,
                "etaMs": e.eta_ms if e.eta_ms >= 0 else None,
            }
        )
    return out


def inspect(path: Optional[Union[str, "os.PathLike[str]"]] = None, *, ttl: Duration = None) -> Dict[str, Any]:
    """Who holds the lock and who waits, with the keys of ``offload-lock
    --json status``: slot 0's ``path``, ``held``, ``pid``, ``startedAt``,
    ``heldForMs``, ``label``, ``host``, ``token``, ``stale`` (None, or why a
    present lock is not held), ``ownerUid``, ``v1Stale``, ``otherPidNamespace``,
    ``gpu``, ``device`` (always None: nvidia-smi's view is the CLI's),
    ``priority`` (the holder's; None when not held), ``expectMs`` (its
    declared duration, None when undeclared), ``freeInMs`` (when it expects
    to be done: 0 when overdue or free, None when unknown),
    ``yieldRequested`` (None, or the ``pid``, ``label`` and ``priority`` of
    the waiter a holder that can yield is asked to make way for); ``slots``
    (one such dictionary per GPU slot that exists), ``waiters`` (see
    waiters(), in serving order), ``busy`` (someone has the GPU: the lock
    is held, or, for slot 0, the gpulease lease that every acquisition of
    it also takes is held: a gpulease holder makes the GPU busy though
    ``held`` is False), ``busyBy`` ("lock", "gpulease" or None) and
    ``gpulease`` (the gpulease lease, see inspect_lease(); None where no
    gpulease root exists).
    Unknown values are None. Changes nothing; never blocks on the lock.
    Raises OSError when the lock cannot be looked at."""
    base = os.fspath(path) if path is not None else default_path()
    ttl_s = parse_duration(ttl, what="ttl") if ttl is not None else None
    ttl_ms = 0 if ttl_s is None else max(1, int(ttl_s * 1000))
    ws = waiters(base)
    # As `offload-lock status`: the slots that exist beside the lock, and
    # those the waiters ask for.
    n = slot_count(base)
    for w in ws:
        n = max(n, w["gpus"], (w["gpu"] if w["gpu"] is not None else -1) + 1)
    # Whether each GPU is busy, and by what (as `status --json`): its lock,
    # or for slot 0 (the plain lock) the gpulease lease every acquisition
    # of it also takes, while a gpulease holder has it.
    _, lease_busy = joined_lease()
    slots = []
    for k in range(n):
        d, q = inspect_both(gpu_slot_path(base, k), ttl_ms)
        by_lease = k == 0 and not d["held"] and lease_busy
        d["busy"] = bool(d["held"]) or by_lease
        d["busyBy"] = "lock" if d["held"] else "gpulease" if by_lease else None
        d["gpu"] = k
        # What nvidia-smi says of the GPU is the command's (`offload-lock
        # status`); the library does not run it, so it is None here.
        d["device"] = None
        d.update(q)
        slots.append(d)
    top = dict(slots[0])
    top["slots"] = slots
    top["waiters"] = ws
    # The gpulease lease of current upstream runners, as `status --json` shows it.
    top["gpulease"] = lease_board()
    return top
