package gpulock

// The gpulease lease: the lease current upstream runners take instead of
// the v1 lock directory (doc/protocol-gpulease.md in the repository). This
// file only looks, by the same rules offload-lock judges the lease with
// (src/gpulease/judge.hpp); it never takes, renews or removes anything.

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LeaseState is a verdict on the lease.
type LeaseState string

const (
	// LeaseFree: no claim.
	LeaseFree LeaseState = "free"
	// LeaseHeld: the holder lives by gpulease's rules, or its claim is being written.
	LeaseHeld LeaseState = "held"
	// LeaseStale: the holder is provably gone; any participant may take it over.
	LeaseStale LeaseState = "stale"
	// LeaseUnknown: something could not be read; it is never taken over.
	LeaseUnknown LeaseState = "unknown"
)

// gpulease's timings.
const (
	leaseHeartbeatTTL = 120 * time.Second
	leaseClaimGrace   = 10 * time.Second
)

// LeaseInfo is one point-in-time, read-only inspection of the lease. The
// holder fields are zero without a parseable claim.
type LeaseInfo struct {
	Dir        string
	State      LeaseState
	Why        string // the verdict in words
	InProgress bool   // an unparseable claim younger than gpulease's 10 s grace

	PID        int
	Class      string // "media" or "text"
	Epoch      uint64 // the lease's fencing epoch
	Reason     string
	Origin     string
	JobID      string
	AcquiredAt time.Time
	ExpiresAt  time.Time // the end of the holder's declared window
	RenewedAt  time.Time // its last heartbeat (hb.<epoch>, else the claim's own stamp)

	// ReadersHeld is what gpulease's own readers conclude from the same
	// files: held exactly when the claim parses and may not be taken over.
	ReadersHeld bool
}

// Held reports whether the lease is held.
func (i LeaseInfo) Held() bool { return i.State == LeaseHeld }

// leaseClaim is gpulease's record; decoding into exactly these types is
// what decides whether a claim parses, as it does for gpulease.
type leaseClaim struct {
	Epoch  uint64 `json:"epoch"`
	Class  string `json:"class"`
	Holder struct {
		PID   int   `json:"pid"`
		Start int64 `json:"start_time_ms"`
	} `json:"holder"`
	JobID      string `json:"job_id"`
	Origin     string `json:"origin"`
	Reason     string `json:"reason"`
	AcquiredAt int64  `json:"acquired_at_ms"`
	ExpiresAt  int64  `json:"expires_at_ms"`
	RenewedAt  int64  `json:"renewed_at_ms"`
}

// LeaseDir returns the lease directory, first match wins: override; the
// GPU_LOCK environment variable (the lease directory itself, as gpulease
// takes it); <OFFLOAD_LOCK_LEASE_ROOT>/gpu/lease;
// <LOCAL_OFFLOAD_STATE_DIR>/gpu/lease; /var/lib/local-offload/gpu/lease.
// Values are trimmed of white space, skipped when empty, and made absolute.
// It only computes a name.
func LeaseDir(override string) string {
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return filepath.Clean(p)
	}
	if v := strings.TrimSpace(override); v != "" {
		return abs(v)
	}
	if v := strings.TrimSpace(os.Getenv("GPU_LOCK")); v != "" {
		return abs(v)
	}
	for _, name := range []string{"OFFLOAD_LOCK_LEASE_ROOT", "LOCAL_OFFLOAD_STATE_DIR"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return filepath.Join(abs(v), "gpu", "lease")
		}
	}
	return "/var/lib/local-offload/gpu/lease"
}

// leaseFile is one file of the lease directory: absent, unreadable (any
// error but ENOENT, a symlink, not a regular file, over 1 MiB), or read.
type leaseFile struct {
	absent, unreadable bool
	why                string
	data               []byte
	mtime              time.Time
}

func readLeaseFile(path string) leaseFile {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return leaseFile{absent: true}
		}
		return leaseFile{unreadable: true, why: "open " + path + ": " + err.Error()}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return leaseFile{unreadable: true, why: "stat " + path + ": " + err.Error()}
	}
	if !st.Mode().IsRegular() {
		return leaseFile{unreadable: true, why: path + " is not a regular file"}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxMetaSize+1))
	if err != nil {
		return leaseFile{unreadable: true, why: "read " + path + ": " + err.Error()}
	}
	if len(data) > maxMetaSize {
		return leaseFile{unreadable: true, why: path + " is larger than 1 MiB"}
	}
	return leaseFile{data: data, mtime: st.ModTime()}
}

// InspectLease judges the lease at dir now: a missing directory or claim is
// free; a claim that cannot be read is unknown. Read-only; safe for
// concurrent use.
func InspectLease(dir string) LeaseInfo { return inspectLeaseAt(dir, time.Now()) }

func inspectLeaseAt(dir string, now time.Time) LeaseInfo {
	info := LeaseInfo{Dir: dir, State: LeaseFree, Why: "no claim"}
	claim := readLeaseFile(filepath.Join(dir, "meta.json"))
	if claim.absent {
		return info
	}
	if claim.unreadable {
		info.State, info.Why = LeaseUnknown, "its claim cannot be read ("+claim.why+"): left alone"
		return info
	}
	var c leaseClaim
	if json.Unmarshal(claim.data, &c) != nil {
		age := now.Sub(claim.mtime)
		if age < leaseClaimGrace {
			info.State, info.InProgress = LeaseHeld, true
			info.Why = "a claim being written (unparseable, " + strconv.FormatInt(age.Milliseconds(), 10) + " ms old)"
		} else {
			info.State, info.Why = LeaseStale, "an unparseable claim, "+strconv.FormatInt(int64(age/time.Second), 10)+" s old"
		}
		return info
	}
	hb := readLeaseFile(filepath.Join(dir, "hb."+strconv.FormatUint(c.Epoch, 10)))
	renewed := c.RenewedAt
	if !hb.absent && !hb.unreadable {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(hb.data)), 10, 64); err == nil && v >= c.RenewedAt {
			renewed = v
		}
	}
	info.PID, info.Class, info.Epoch = c.Holder.PID, c.Class, c.Epoch
	info.Reason, info.Origin, info.JobID = c.Reason, c.Origin, c.JobID
	info.AcquiredAt, info.ExpiresAt, info.RenewedAt = time.UnixMilli(c.AcquiredAt), time.UnixMilli(c.ExpiresAt), time.UnixMilli(renewed)
	info.State, info.Why, info.ReadersHeld = judgeLease(&c, renewed, hb.unreadable, now)
	return info
}

// judgeLease is rules 4 to 7 of the judgment (doc/protocol-gpulease.md,
// "When a lease may be taken over").
func judgeLease(c *leaseClaim, renewed int64, hbUnreadable bool, now time.Time) (LeaseState, string, bool) {
	nowMs := now.UnixMilli()
	windowOver := nowMs > c.ExpiresAt
	staleHeartbeat := renewed > 0 && nowMs-renewed > leaseHeartbeatTTL.Milliseconds()
	pid := c.Holder.PID
	if pid <= 0 {
		if windowOver {
			return LeaseStale, "no holder pid, and its window ended", false
		}
		return LeaseHeld, "no holder pid; held until its window ends", true
	}
	checkStart := true
	if pid <= math.MaxInt32 {
		if !signalZeroAlive(pid) {
			return LeaseStale, "holder pid " + strconv.Itoa(pid) + " is gone", false
		}
		if procIsOwn() {
			if state, _, ok := readProcStat(pid); ok && (state == 'Z' || state == 'X') {
				// gpulease waits for its heartbeat and window; it has exited.
				return LeaseStale, "holder pid " + strconv.Itoa(pid) + " has exited (a zombie)", !(staleHeartbeat && windowOver)
			}
		}
	} else {
		checkStart = false // not a pid of this kernel: the conjunction decides
	}
	if checkStart && c.Holder.Start != 0 && procIsOwn() {
		if _, ticks, ok := readProcStat(pid); ok && int64(ticks) != c.Holder.Start {
			return LeaseStale, "pid " + strconv.Itoa(pid) + " now names another process", false
		}
	}
	if staleHeartbeat && windowOver {
		if hbUnreadable {
			return LeaseUnknown, "its heartbeat file cannot be read, and without it the lease would be stale: left alone", false
		}
		return LeaseStale, "heartbeat " + strconv.FormatInt((nowMs-renewed)/1000, 10) + " s old and its window ended", false
	}
	return LeaseHeld, "held", true
}
