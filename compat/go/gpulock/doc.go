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
// procTicks, tool).
//
// This package only looks. It never creates, reclaims, refreshes or removes the
// lock directory or anything in it; acquiring and reclaiming belong to the
// runners and to offload-lock. A lock this package reports as "not held" may
// still exist on disk (stale, or half-written by a runner that is between its
// mkdir and its meta.json write).
//
// The rules are those of the original Go reader, kept exactly, quirks included,
// because Go programs running beside the Node runners and offload-lock must keep
// seeing what they have always seen (see PROTOCOL.md, section A5):
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
// Note that Path follows Go's os.TempDir, which looks only at TMPDIR; the Node
// runners also look at TMP and TEMP. With TMPDIR unset and TMP or TEMP set, the
// two sides resolve different default paths (see Path).
package gpulock
