"""offload_lock: the machine-wide GPU lock for Python programs.

The same lock as the ``offload-lock`` command, the C++ library, the Node
runners' ``gpu-lock.mjs`` and the Go readers: a directory
(``<tmpdir>/local-offload-gpu.lock`` unless ``$GPU_LOCK`` says otherwise)
taken and released by the project's C++ library through its C API.

    import offload_lock

    with offload_lock.lock(label="train", wait="30m") as held:
        run_on_gpu()

See lock() for the contract; compat/python/README.md for installation.
"""

from ._api import lock, lock_async
from ._errors import Busy, LockError, Timeout
from ._handle import Handle
from ._inspect import default_path, inspect, waiters
from ._lock import Lock
from ._native import library_path
from ._wait_line import WaitProgress
from ._words import (
    describe_duration,
    describe_holder,
    describe_state,
    gpu_count,
    gpu_slot_path,
    parse_duration,
    parse_priority,
    visible_gpus,
)
from ._lease import find_lease, inspect_lease, joined_lease

__all__ = [
    "Busy",
    "Handle",
    "Lock",
    "LockError",
    "Timeout",
    "WaitProgress",
    "default_path",
    "describe_duration",
    "describe_holder",
    "describe_state",
    "find_lease",
    "gpu_count",
    "gpu_slot_path",
    "inspect",
    "inspect_lease",
    "joined_lease",
    "library_path",
    "lock",
    "lock_async",
    "parse_duration",
    "parse_priority",
    "visible_gpus",
    "waiters",
    "__version__",
]

__version__ = "0.2.0"
