package gpulock

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// DescribeHolder names the holder an inspection found as offload-lock names
// it: "LABEL (pid N, host H)". A holder without a label (a v1 Node runner)
// on this host is named by its process's kernel name (/proc/<pid>/comm);
// else "an unnamed holder". ", host H" only when a host is recorded; "pid
// unknown" when no pid is. The label and host are the holder's own words:
// escape them before a terminal sees them.
func DescribeHolder(info Info) string {
	label := info.Label
	if label == "" && info.PID > 0 && (info.Host == "" || info.Host == hostName()) {
		label = commandName(info.PID)
	}
	if label == "" {
		label = "an unnamed holder"
	}
	pid := "unknown"
	if info.PID != 0 {
		pid = strconv.Itoa(info.PID)
	}
	s := label + " (pid " + pid
	if info.Host != "" {
		s += ", host " + info.Host
	}
	return s + ")"
}

// DescribeState says what an inspection found in the words of
// `offload-lock status`: "held by HOLDER for 5m12s", or "free" (the Go
// reader's free covers a stale lock too: it keeps no reason).
func DescribeState(info Info) string {
	if !info.Held {
		return "free"
	}
	return "held by " + DescribeHolder(info) + " for " + DescribeDuration(HeldFor(info, time.Now()))
}

// HeldFor is how long the holder has held the lock at `now`, as offload-lock
// counts it: since its startedAt, or since the meta.json mtime (Age) when it
// recorded none. Zero when not held.
func HeldFor(info Info, now time.Time) time.Duration {
	if !info.Held {
		return 0
	}
	if !info.StartedAt.IsZero() {
		return now.Sub(info.StartedAt)
	}
	return info.Age
}

func hostName() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// commandName is /proc/<pid>/comm without its newline; "" when unreadable.
func commandName(pid int) string {
	b, err := readCapped("/proc/"+strconv.Itoa(pid)+"/comm", 4096)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}
