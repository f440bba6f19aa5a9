package gpulock

// The GPU as a whole: the v1 lock, and the gpulease lease offload-lock's
// acquisitions also take where the upstream's current runners keep one
// (doc/protocol-gpulease.md, "Every acquisition holds both"). A gpulease
// holder has the GPU though the lock is free, so "is the card free" is
// GPU.Busy, not Info.Held. Read-only, like the rest of the package; the
// rules are offload-lock's (src/gpulease/look.hpp, joined_by_acquisitions),
// written again here.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// GPU is one read-only look at the GPU of a plain lock: the lock, by the
// rules Inspect has always used, and the gpulease lease that goes with it.
type GPU struct {
	Lock Info
	// Lease is the lease offload-lock's acquisitions also take, judged by
	// gpulease's rules (InspectLease); nil where they take none (see
	// JoinedLeaseDir).
	Lease *LeaseInfo
}

// Busy reports whether someone has the GPU: the lock is held, or the lease
// is held or cannot be judged (a lease that cannot be read is never taken
// over, so offload-lock waits for it as for a holder).
func (g GPU) Busy() bool {
	return g.Lock.Held || (g.Lease != nil && (g.Lease.State == LeaseHeld || g.Lease.State == LeaseUnknown))
}

// JoinedLeaseDir returns the lease directory in which offload-lock's
// acquisitions of a plain lock also take a gpulease lease, and whether they
// take one at all. They do where a state root rule places the lease
// (OFFLOAD_LOCK_LEASE_ROOT, else LOCAL_OFFLOAD_STATE_DIR, else
// /var/lib/local-offload: <root>/gpu/lease), that root is a directory this
// process can open, and gpulease accepts the path (no segment is a
// cloud-sync folder). They do not where GPU_LOCK is set: gpulease would read
// it as its lease directory, one directory for both protocols, in which
// offload-lock takes no lease. It never creates anything.
func JoinedLeaseDir() (string, bool) {
	if strings.TrimSpace(os.Getenv("GPU_LOCK")) != "" {
		return "", false
	}
	root := defaultStateRoot
	for _, name := range []string{"OFFLOAD_LOCK_LEASE_ROOT", "LOCAL_OFFLOAD_STATE_DIR"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			root = v
			break
		}
	}
	if a, err := filepath.Abs(root); err == nil {
		root = a
	} else {
		root = filepath.Clean(root)
	}
	dir := filepath.Join(root, "gpu", "lease")
	if syncRootReason(root) != "" || syncRootReason(dir) != "" {
		return "", false
	}
	// As offload-lock opens it: a directory, symlinks followed, read
	// permission needed.
	fd, err := syscall.Open(root, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	syscall.Close(fd)
	return dir, true
}

// sharedLeaseDir returns lockPath when it is the directory GPU_LOCK names
// and gpulease's counter (epoch) is beside it: then gpulease uses the lock
// directory as its lease directory, and offload-lock's one meta.json there
// is both records (offload-lock's lease_sharing). A GPU_LOCK beside no
// counter is a v1 lock alone: gpulease has never been there.
func sharedLeaseDir(lockPath string) (string, bool) {
	if strings.TrimSpace(os.Getenv("GPU_LOCK")) == "" {
		return "", false
	}
	dir := LeaseDir("")
	abs, err := filepath.Abs(lockPath)
	if err != nil || abs != dir || syncRootReason(dir) != "" {
		return "", false
	}
	st, err := os.Stat(filepath.Join(filepath.Dir(dir), "epoch"))
	if err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	return dir, true
}

// defaultStateRoot is gpulease's machine-wide state root on Linux.
const defaultStateRoot = "/var/lib/local-offload"

// syncRootReason is gpulease's refusal of a cloud-synced path: why, or ""
// when it accepts it. Segments split at '/' and '\\', trimmed, compared in
// lower case (offload-lock's sync_root_reason).
func syncRootReason(path string) string {
	exact := []string{"my drive", "google drive", "googledrive", "shared drives", "box sync", "nextcloud",
		"owncloud", "syncthing", "pcloud", "mega"}
	prefixes := []string{"onedrive", "dropbox", "icloud"}
	for _, raw := range strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == '\\' }) {
		seg := strings.TrimSpace(raw)
		lower := make([]byte, len(seg))
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		s := string(lower)
		if s == "" {
			continue
		}
		for _, m := range exact {
			if s == m {
				return `path segment "` + s + `" is a cloud-sync root`
			}
		}
		for _, m := range prefixes {
			if !strings.HasPrefix(s, m) {
				continue
			}
			rest := s[len(m):]
			if rest == "" || rest[0] == ' ' || rest[0] == '(' || rest == "drive" {
				return `path segment "` + s + `" is a cloud-sync root`
			}
		}
	}
	return ""
}

// InspectGPU looks at the GPU of the lock at lockPath (a plain lock: the
// lease goes with it, or with its GPU slot 0) now: the lock as Inspect
// judges it (opts.TTL, default one hour) and the joined lease. Read-only;
// safe for concurrent use.
func InspectGPU(lockPath string, opts Options) GPU {
	g := GPU{Lock: InspectTTL(lockPath, opts.ttl())}
	if dir, ok := sharedLeaseDir(lockPath); ok {
		// One meta.json is the lock and the lease. A gpulease claim (no pid
		// of the v1 record's own, which offload-lock's claims there carry)
		// is judged by gpulease's rules, as offload-lock judges it: its
		// holder has the lock while it lives, and a dead one's claim leaves
		// the GPU free, not held until the one-hour TTL.
		l := InspectLease(dir)
		g.Lease = &l
		if g.Lock.Held && g.Lock.PID == 0 && l.PID > 0 {
			if l.State == LeaseHeld || l.State == LeaseUnknown {
				g.Lock.PID = l.PID
			} else {
				g.Lock = Info{}
			}
		}
		return g
	}
	if dir, ok := JoinedLeaseDir(); ok {
		l := InspectLease(dir)
		g.Lease = &l
	}
	return g
}

// WaitGPUFree looks at the GPU (InspectGPU) until it is not Busy,
// opts.Wait has elapsed, or ctx is done, and returns the FINAL look:
// Busy() false means free now. It looks at once and then every opts.Poll
// (at least 1 ms), the last sleep shortened so that it looks once more as
// the wait runs out; a done ctx returns the last look at once (a nil ctx is
// context.Background()). opts.Within applies to the lock's holder as in
// WaitUntilFree; a gpulease holder declares no duration and is waited for.
// Read-only.
func WaitGPUFree(ctx context.Context, lockPath string, opts Options) GPU {
	var budget time.Time
	if opts.Within > 0 {
		budget = time.Now().Add(opts.Within)
	}
	return pollUntil(ctx, opts.Wait, opts.Poll, func() GPU { return InspectGPU(lockPath, opts) }, func(g GPU) bool {
		return !g.Busy() ||
			(!budget.IsZero() && g.Lock.Held && !g.Lock.ExpectedFree.IsZero() && g.Lock.ExpectedFree.After(budget))
	})
}
