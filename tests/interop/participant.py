#!/usr/bin/python3
"""Python participant of the contention stress test (stress.mjs).

  participant.py loop --lock P --dir D --tag T [--wait-ms N] [--cs-min N]
      [--cs-max N] [--think-min N] [--think-max N] [--skip-lock-every N]

The `loop` mode of participant.mjs for one kind, `py`: acquire through the
Python package (compat/python/offload_lock) -> critical section -> release,
until <D>/stop exists. The critical-section sentinel and the event lines are
those of cs.mjs.

Needs /usr/bin/python3 (stdlib only), compat/python on PYTHONPATH and, unless
the package finds it itself, OFFLOAD_LOCK_LIBRARY naming liboffload_lock.so.
"""

import errno
import os
import random
import re
import sys
import time

KIND = "py"
PF_EXITING = 0x4


def now_str():
    return "%.3f" % (time.time_ns() / 1e6)


def emit(typ, *fields):
    # One write(2) per line, straight to the descriptor: a SIGKILL never
    # loses a finished line.
    data = ("%s %s %s\n" % (typ, now_str(), " ".join(str(f) for f in fields))).encode()
    n = os.write(1, data)
    while n < len(data):  # only a regular file or a full disk writes short
        data = data[n:]
        n = os.write(1, data)


def proc_stat(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            text = f.read().decode("latin-1")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    f = text[text.rfind(")") + 2:].split(" ")
    if len(f) < 20:
        return None
    try:
        flags = int(f[6])
    except ValueError:
        flags = 0
    return {"state": f[0], "flags": flags, "start": f[19]}


def writer_dead(pid, start):
    """Gone, pid reused (other start time), zombie, or exiting."""
    s = proc_stat(pid)
    if s is None:
        return True
    if start is not None and str(s["start"]) != str(start):
        return True
    if s["state"] in ("Z", "X", "x"):
        return True
    return (s["flags"] & PF_EXITING) != 0


def parse_sentinel(text):
    parts = text.split()
    parts += ["?", "0", "0", "?"][len(parts):]
    try:
        pid = int(parts[1])
    except ValueError:
        pid = 0
    return {"tag": parts[0], "pid": pid, "start": parts[2], "flag": parts[3]}


def read_or_none(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def code_of(err):
    return errno.errorcode.get(err.errno, str(err.errno))


def sleep_ms(ms):
    if ms > 0:
        time.sleep(ms / 1000.0)


def uniform(lo, hi):
    return lo if hi <= lo else lo + random.random() * (hi - lo)


class Sentinel:
    def __init__(self, dir_, tag, kind):
        self.dir = dir_
        self.tag = tag
        self.kind = kind
        self.file = os.path.join(dir_, "in-cs")
        me = proc_stat(os.getpid())
        self.id = "%s %d %s" % (tag, os.getpid(), me["start"] if me else 0)
        self.flag = "L"
        self.mine = ""

    def enter(self, locked=True):
        # L: this entry holds the lock; N: the detector self-test, it does not.
        self.flag = "L" if locked else "N"
        self.mine = "%s %s\n" % (self.id, self.flag)
        tmp = os.path.join(self.dir, "in-cs.tmp.%d" % os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            os.write(fd, self.mine.encode())
        finally:
            os.close(fd)
        # The supervisor clears a killed holder's sentinel; on a loaded
        # machine it may be late, so the bound is generous.
        deadline = time.monotonic() + 10.0
        while True:
            # link(2) fails with EEXIST exactly like O_CREAT|O_EXCL, and the
            # sentinel is never seen empty.
            try:
                os.link(tmp, self.file)
                break
            except FileExistsError:
                pass
            except OSError as err:
                emit("E", self.tag, "link-in-cs:%s" % code_of(err))
                break
            other = read_or_none(self.file)
            if other is None:
                continue  # removed meanwhile: try again
            inside = parse_sentinel(other)
            if inside["pid"] > 0 and writer_dead(inside["pid"], inside["start"]):
                # Left by a participant killed inside its critical section:
                # the supervisor clears it and counts a kill cleanup.
                emit("D", self.tag, inside["tag"], inside["pid"])
                while read_or_none(self.file) == other:
                    if time.monotonic() > deadline:
                        emit("E", self.tag, "dead-sentinel-not-cleared %s" % inside["tag"])
                        try:
                            os.unlink(self.file)
                        except OSError:
                            pass
                        break
                    sleep_ms(1)
                continue
            # Someone alive is inside: an overlap. Take the sentinel over so
            # that the next entrant is checked against us.
            emit("O", self.tag, self.kind, inside["tag"], inside["pid"], self.flag, inside["flag"])
            try:
                os.rename(tmp, self.file)
            except OSError as err:
                emit("E", self.tag, "rename-in-cs:%s" % code_of(err))
            return
        try:
            os.unlink(tmp)
        except OSError:
            pass

    def leave(self):
        now = read_or_none(self.file)
        if now is None:
            emit("G", self.tag, "missing")
            return
        if now != self.mine:
            emit("G", self.tag, "replaced-by", parse_sentinel(now)["tag"])
            return
        try:
            os.unlink(self.file)
        except OSError:
            pass


def one_word(err):
    return re.sub(r"\s+", "_", str(err) or type(err).__name__)


def parse_args(argv):
    o = {}
    i = 0
    while i < len(argv):
        k = argv[i]
        if not k.startswith("--") or i + 1 >= len(argv):
            sys.stderr.write("participant.py: bad argument %s\n" % k)
            sys.exit(2)
        o[k[2:]] = argv[i + 1]
        i += 2
    return o


def loop(o):
    import offload_lock

    for k in ("lock", "dir", "tag"):
        if k not in o:
            sys.stderr.write("participant.py: loop needs --%s\n" % k)
            sys.exit(2)
    lock_path, dir_, tag = o["lock"], o["dir"], o["tag"]

    def num(k, d):
        return float(o[k]) if k in o else d

    wait_ms = num("wait-ms", 3000)
    cs_min = num("cs-min", 1)
    cs_max = num("cs-max", 4)
    think_min = num("think-min", 0)
    think_max = num("think-max", 5)
    skip_every = int(num("skip-lock-every", 0))
    stop_file = os.path.join(dir_, "stop")
    me = proc_stat(os.getpid())
    cs = Sentinel(dir_, tag, KIND)
    # acquire()/release() rather than `with`: the context manager drops
    # release()'s result, and a lost lock must be reported (event L).
    lk = offload_lock.lock(lock_path, wait=wait_ms / 1000.0, label=tag, quiet=True)

    cycle = 0
    while not os.path.exists(stop_file):
        cycle += 1
        sleep_ms(uniform(think_min, think_max))
        if os.path.exists(stop_file):
            break
        if skip_every > 0 and cycle % skip_every == 0:
            cs.enter(False)
            emit("N", tag, KIND)
            sleep_ms(uniform(cs_min, cs_max))
            cs.leave()
            emit("X", tag)
            continue
        try:
            h = lk.acquire()
        except (offload_lock.Busy, offload_lock.Timeout):
            emit("T", tag)
            continue
        except Exception as err:
            emit("E", tag, "acquire:%s" % one_word(err))
            sleep_ms(50)
            continue
        cs.enter(True)
        emit("A", tag, KIND, os.getpid(), me["start"] if me else 0, h.token or "-")
        sleep_ms(uniform(cs_min, cs_max))
        cs.leave()
        emit("X", tag)
        try:
            released = h.release()
        except Exception as err:
            emit("E", tag, "release:%s" % one_word(err))
            continue
        if not released:
            emit("L", tag, "%s release" % KIND)
        emit("F", tag)


def main():
    if len(sys.argv) < 2 or sys.argv[1] != "loop":
        sys.stderr.write("usage: participant.py loop --lock P --dir D --tag T ...\n")
        sys.exit(2)
    opts = parse_args(sys.argv[2:])
    try:
        loop(opts)
    except SystemExit:
        raise
    except BaseException as err:
        import traceback

        sys.stderr.write("participant.py: %s\n" % "".join(traceback.format_exception(type(err), err, err.__traceback__)))
        sys.exit(4)


if __name__ == "__main__":
    main()
