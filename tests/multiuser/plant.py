"""Plants queue entries beside a lock the way a hostile local user could.

Usage: plant.py LOCK COUNT PRIORITY [CHURN_MS]

Run as the attacking user. Makes COUNT entries naming this process (alive,
so not forgeries), each write-locked with an OFD lock as a live waiter keeps
its own, at priority PRIORITY, claiming the earliest possible arrival. They
go both where 0.2 looked (`.<name>.waiters/`) and where the queue is now
(`.<name>.queue/u<uid>/`), so one attack serves against either version.
Prints "planted" once they are all in place. With CHURN_MS, every CHURN_MS
milliseconds each entry is replaced by a new one (new name, new inode).
With PLANT_CHILDREN=1 in the environment, each entry names a process of
its own (a sleeping child), as one planting process per entry would.
Runs until its standard input ends.
"""
import fcntl
import os
import secrets
import select
import socket
import struct
import subprocess
import sys

F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)
# struct flock on Linux x86-64 and aarch64: l_type, l_whence, l_start,
# l_len, l_pid, padded to 32 bytes.
WRITE_LOCK = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)


def open_dir(path, mode):
    """Makes `path` (as the protocol's writers do) unless it exists."""
    try:
        os.mkdir(path)
        os.chmod(path, mode)
    except FileExistsError:
        pass
    return path


def entry_dirs(lock):
    parent, name = os.path.split(os.path.abspath(lock))
    shared = (os.stat(parent).st_mode & 0o777) | 0o1000
    old = open_dir(os.path.join(parent, "." + name + ".waiters"), shared)
    top = open_dir(os.path.join(parent, "." + name + ".queue"), shared)
    mine = open_dir(os.path.join(top, "u%d" % os.geteuid()), 0o755)
    return [old, mine]


CHILDREN = []


def plant_one(directory, priority):
    pid = os.getpid()
    if os.environ.get("PLANT_CHILDREN") == "1":
        child = subprocess.Popen(["sleep", "100000"], stdin=subprocess.DEVNULL)
        CHILDREN.append(child)
        pid = child.pid
    stem = "%d-%s" % (pid, secrets.token_hex(6))
    body = ('{"pid":%d,"label":"planted","host":"%s","since":1,"gpu":null,"gpus":1,'
            '"priority":%d,"queuedUs":1}\n' % (pid, socket.gethostname(), priority))
    tmp = os.path.join(directory, "." + stem + ".tmp")
    final = os.path.join(directory, stem + ".json")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    os.write(fd, body.encode())
    os.fchmod(fd, 0o644)
    fcntl.fcntl(fd, F_OFD_SETLK, WRITE_LOCK)
    os.rename(tmp, final)
    return (fd, final)


def main():
    lock, count, priority = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    churn_ms = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    dirs = entry_dirs(lock)
    planted = [plant_one(d, priority) for _ in range(count) for d in dirs]
    print("planted", flush=True)
    timeout = churn_ms / 1000.0 if churn_ms else None
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        if ready and not sys.stdin.readline():
            break
        if churn_ms:
            fresh = [plant_one(d, priority) for _ in range(count) for d in dirs]
            for fd, name in planted:
                os.unlink(name)
                os.close(fd)
            planted = fresh
    for fd, name in planted:
        os.unlink(name)
        os.close(fd)
    for child in CHILDREN:
        child.kill()
        child.wait()


if __name__ == "__main__":
    main()
