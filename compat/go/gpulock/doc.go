// Package gpulock is a READ-ONLY view of the machine-wide GPU lock shared by the
// Node render runners (gpu-lock.mjs), offload-lock, and other participants.
//
// Its import path is offload-lock/compat/go/gpulock; the command
// offload-lock/compat/go/cmd/gpulock-inspect is built on it.
//
// The lock is a directory (by default <os.TempDir()>/local-offload-gpu.lock)
// created atomically with mkdir by whoever takes the GPU. Inside it, meta.json
// records the holder as {"pid":N,"startedAt":MS}, optionally followed by extra
// keys written by offload-lock (token, label, host, bootId, procStart,
// procTicks, tool, priority, expectMs).
//
// This package only looks. It never creates, reclaims, refreshes or removes the
// lock directory or anything in it; acquiring and reclaiming belong to the
// runners and to offload-lock. A lock this package reports as "not held" may
// still exist on disk (stale, or half-written by a runner that is between its
// mkdir and its meta.json write).
//
// The rules are those of the original Go reader, kept exactly, quirks included,
// because Go programs running beside the Node runners and offload-lock must keep
// seeing what they have always seen (see doc/protocol.md, rule A5):
//
//   - lock path missing or not a directory: free;
//   - meta.json missing, unreadable, or larger than 1 MiB: free;
//   - meta.json not decodable by encoding/json into {pid int, startedAt int64}:
//     free. So a pid that is a string or any non-integral number (1.5, 123.0),
//     a startedAt that is a string, an empty file, "[]", trailing garbage and a
//     UTF-8 byte-order mark all read as FREE, while the JSON literal null
//     decodes without error and reads as HELD with pid 0 (within the TTL);
//   - pid > 0 and kill(pid, 0) fails with anything but EPERM: free
//     (pid <= 0 is never signalled);
//   - now - mtime(meta.json) > TTL (default one hour): free;
//   - otherwise held.
//
// Beyond those rules, which alone decide Held, Info reports what an
// offload-lock holder declared in meta.json: its queue Priority, how long it
// expects to hold the lock (ExpectMs) and so when it expects to free it
// (ExpectedFree, the zero time when undeclared or free). WaitUntilFree
// with Options.Within uses that to answer at once when the lock will not be
// free within a budget, instead of waiting the budget out.
//
// ParseDuration, DescribeDuration, DescribeHolder and DescribeState are the
// offload-lock command's grammar and words, written again in Go (which has
// no cgo here) and tested against the command; SlotPath, SlotCount and
// InspectSlots read the GPU slots beside a lock.
//
// Waiters lists the offload-lock processes queued for the lock, in the order
// the lock will serve them, read from the queue registry beside the lock by
// the rules of offload-lock's own reader: an entry counts only while its
// waiter keeps it write-locked (an OFD lock, which no other user can take
// for it), it speaks only for the owner of its directory, and it arrived
// when its file's ctime says.
//
// LeaseDir and InspectLease look at the gpulease lease that the upstream's
// current runners take instead of the lock, by gpulease's rules. Where
// offload-lock's acquisitions take that lease too (JoinedLeaseDir), a
// gpulease holder has the GPU while the lock is free: InspectGPU and
// WaitGPUFree answer "is the GPU free" for both (GPU.Busy), by offload-lock's
// rule. Inspect and WaitFree keep answering for the lock alone.
//
// Note that Path follows Go's os.TempDir, which looks only at TMPDIR; the Node
// runners also look at TMP and TEMP. With TMPDIR unset and TMP or TEMP set, the
// two sides resolve different default paths (see Path).
package gpulock
