package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// holder and claim are the claim's JSON shape (meta.json in the lease
// directory). Decoding into exactly these types is what decides whether a
// claim parses.
type holder struct {
	PID   int   `json:"pid"`
	Start int64 `json:"start_time_ms"`
}

type claim struct {
	Epoch      uint64 `json:"epoch"`
	Class      string `json:"class"`
	Holder     holder `json:"holder"`
	JobID      string `json:"job_id,omitempty"`
	Origin     string `json:"origin,omitempty"`
	Reason     string `json:"reason,omitempty"`
	AcquiredAt int64  `json:"acquired_at_ms"`
	ExpiresAt  int64  `json:"expires_at_ms"`
	RenewedAt  int64  `json:"renewed_at_ms"`
}

const (
	claimFile        = "meta.json"
	heartbeatTTL     = 120 * time.Second
	claimGrace       = 10 * time.Second
	counterLockStale = 30 * time.Second
)

func parseClaim(b []byte) (*claim, error) {
	var c claim
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func readClaim(dir string) (*claim, error) {
	b, err := os.ReadFile(filepath.Join(dir, claimFile))
	if err != nil {
		return nil, err
	}
	return parseClaim(b)
}

// heartbeat is the renewal that counts: hb.<epoch> when it parses and is
// not older than the claim's own stamp.
func heartbeat(dir string, c *claim) int64 {
	b, err := os.ReadFile(filepath.Join(dir, "hb."+strconv.FormatUint(c.Epoch, 10)))
	if err != nil {
		return c.RenewedAt
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < c.RenewedAt {
		return c.RenewedAt
	}
	return v
}

// alive is kill(pid, 0) with EPERM counted as alive.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// startTicks is field 22 of /proc/<pid>/stat (after the last ')').
func startTicks(pid int) (int64, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndex(s, ")")
	if i < 0 || i+2 >= len(s) {
		return 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(f[19], 10, 64)
	return v, err == nil
}

// takeable is the takeover rule: no claim to read is takeable; no holder
// pid leaves the window to decide; a gone or reused pid is takeable;
// otherwise only a stale heartbeat together with an ended window.
func takeable(dir string, c *claim, now time.Time) bool {
	if c == nil {
		return true
	}
	nowMs := now.UnixMilli()
	if c.Holder.PID <= 0 {
		return nowMs > c.ExpiresAt
	}
	if !alive(c.Holder.PID) {
		return true
	}
	if c.Holder.Start != 0 {
		if s, ok := startTicks(c.Holder.PID); ok && s != c.Holder.Start {
			return true
		}
	}
	hb := heartbeat(dir, c)
	return hb > 0 && nowMs-hb > heartbeatTTL.Milliseconds() && nowMs > c.ExpiresAt
}

// view is what a reader reports: held unless the claim is missing,
// unparseable or takeable.
type view struct {
	Held      bool   `json:"held"`
	Class     string `json:"class"`
	Epoch     uint64 `json:"epoch"`
	PID       int    `json:"pid"`
	Reason    string `json:"reason"`
	Origin    string `json:"origin"`
	JobID     string `json:"jobId"`
	ExpiresAt int64  `json:"expiresAt"`
	RenewedAt int64  `json:"renewedAt"`
}

func inspect(dir string) view {
	c, err := readClaim(dir)
	if err != nil || takeable(dir, c, time.Now()) {
		return view{}
	}
	return view{Held: true, Class: c.Class, Epoch: c.Epoch, PID: c.Holder.PID, Reason: c.Reason,
		Origin: c.Origin, JobID: c.JobID, ExpiresAt: c.ExpiresAt, RenewedAt: heartbeat(dir, c)}
}
