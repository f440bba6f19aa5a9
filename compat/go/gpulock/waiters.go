package gpulock

import "time"

// Waiter is one offload-lock process waiting for the lock, as its entry in
// the queue's registry next to the lock directory says.
type Waiter struct {
	// PID is the waiting process (always positive).
	PID int

	// Label is what waits (the --label given to offload-lock, or its program
	// name); "" when the entry holds no string label.
	Label string

	// Host is the host name the waiter recorded; "" when absent.
	Host string

	// Since is when its wait began (the entry's "since", epoch milliseconds;
	// the Unix epoch itself when the entry holds none).
	Since time.Time

	// Waited is the time since Since, measured when Waiters ran; 0 when the
	// entry holds no positive "since" or Since lies in the future.
	Waited time.Duration

	// GPU is the slot the waiter asked for (--gpu K); -1 means it takes the
	// first free of GPUs slots.
	GPU int

	// GPUs is the number of slots the waiter chooses among (1 without GPU
	// slots).
	GPUs int

	// Slots, for a wait among several slots restricted to some of them
	// (CUDA_VISIBLE_DEVICES), are those slots; nil when it takes any of
	// GPUs (and for a wait for one slot).
	Slots []int

	// Position is the waiter's place in the queue, 1 being next, as
	// offload-lock numbers it: one more than the waiters before it in the
	// list that would take a slot this one would take (the same GPU, slot 0
	// for a plain lock, any of the slots a wait among several accepts).
	Position int

	// Priority is the waiter's priority (-100..100, higher served first;
	// 0, "normal", when the entry holds none).
	Priority int

	// ExpectMs is how long the waiter declared it would hold the lock, in
	// milliseconds (offload-lock --expect); 0 when undeclared.
	ExpectMs int64
}

const (
	// maxGPUSlots bounds "gpu" (0..maxGPUSlots-1) and "gpus" (1..maxGPUSlots).
	maxGPUSlots = 1024

	// maxListedSlots is the most "slots" an entry may list; a longer list
	// is ignored (the wait accepts any of its GPUs).
	maxListedSlots = 64

	// minPriority and maxPriority bound "priority"; values outside are
	// clamped to them.
	minPriority, maxPriority = -100, 100
)

// Waiters lists the offload-lock processes waiting for the lock at lockPath
// (slot 0's path when there are GPU slots), in the order the lock serves
// them: priority (highest first), then arrival (the entry file's ctime,
// earliest first), then the entry's owner, directory and name. nil when none
// (or the registry cannot be read).
//
// The registry is the directory "<parent>/.<name>.queue" beside the lock
// "<parent>/<name>". It holds one directory per user, speaking for its owner
// (by the directory's owner, not its name), and in it one
// "<pid>-<12 hex>.json" file per waiting acquisition. An entry counts only
// while someone holds an OFD write lock on it (which only the file's owner
// can take, so no other user can fake a waiter), it is a regular file of
// its directory's owner of at most 4 KiB, it records the pid its name
// starts with, and, unless it is root's, that pid (if it is a process here)
// is a process of the entry's owner. Its arrival is the file's ctime, which
// the kernel sets when the entry is renamed into place and nobody can set
// back. A flood is read with bounds: the first 256 names of the registry,
// the first 64 other users' directories by name, the first 256 names of
// each of those (16384 of this user's own). These are the rules of
// offload-lock's own reader (registry_reader::live, src/registry.cpp).
//
// Waiters is read-only: it never creates, modifies or removes anything (the
// write-lock probe, F_OFD_GETLK, takes no lock), opens no FIFO, and follows
// no symlink below the lock's parent (a symlinked registry, user directory
// or entry is ignored). Dead entries stay on disk until offload-lock sweeps
// them. It is safe for concurrent use.
//
// For an etcd lock the waiters are its queue's entries in etcd (WaitersEtcd
// says why when they cannot be read).
func Waiters(lockPath string) []Waiter {
	if IsEtcd(lockPath) {
		ws, _ := waitersEtcd(lockPath)
		return ws
	}
	queue := readQueue(lockPath)
	if len(queue) == 0 {
		return nil
	}
	now := time.Now()
	out := make([]Waiter, len(queue))
	for k := range queue {
		rec := &queue[k].rec
		since := time.UnixMilli(rec.since)
		// A missing or nonsensical start (0, negative, in the future) reads
		// as no time waited, as offload-lock shows it.
		waited := now.Sub(since)
		if rec.since <= 0 || waited < 0 {
			waited = 0
		}
		out[k] = Waiter{
			PID:      int(rec.pid),
			Label:    rec.label,
			Host:     rec.host,
			Since:    since,
			Waited:   waited,
			GPU:      rec.gpu,
			GPUs:     rec.gpus,
			Slots:    rec.slots,
			Priority: rec.priority,
			ExpectMs: rec.expectMs,
			Position: 1,
		}
		w := &out[k]
		span := w.GPUs
		if w.GPU+1 > span {
			span = w.GPU + 1
		}
		for j := 0; j < k; j++ {
			for slot := 0; slot < span; slot++ {
				if accepts(*w, slot) && accepts(out[j], slot) {
					w.Position++
					break
				}
			}
		}
	}
	return out
}

// accepts reports whether w would take slot: its GPU, slot 0 for a plain
// lock, or for a wait among several slots any of its GPUs (of its Slots,
// when it lists them).
func accepts(w Waiter, slot int) bool {
	switch {
	case w.GPU >= 0:
		return w.GPU == slot
	case w.GPUs <= 1:
		return slot == 0
	}
	if slot < 0 || slot >= w.GPUs {
		return false
	}
	if w.Slots == nil {
		return true
	}
	for _, s := range w.Slots {
		if s == slot {
			return true
		}
	}
	return false
}
