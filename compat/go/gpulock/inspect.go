package gpulock

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// DefaultTTL is the age of meta.json (measured from its mtime) beyond which a
// lock is stale, the same one hour the Node runners use.
const DefaultTTL = time.Hour

// metaFileName is the holder record inside the lock directory.
const metaFileName = "meta.json"

// maxMetaSize caps how much of meta.json is read. A real record is well under
// 1 KiB; a larger file is treated as unreadable (free) rather than read whole.
const maxMetaSize = 1 << 20

// Info is one point-in-time, read-only inspection of the lock. When the lock
// is not held, every field is its zero value.
type Info struct {
	// Held is true when the lock directory exists AND its meta.json is not
	// stale: present, readable, decodable, holder pid alive (or not
	// checked), and mtime no older than the TTL.
	Held bool

	// Age is the time since the meta.json mtime, the clock the Node runners
	// use for their TTL (not startedAt). It is negative if the mtime lies in
	// the future. Zero when not held.
	Age time.Duration

	// PID is the holder pid recorded in meta.json, exactly as recorded
	// (0 when the key is absent or the lock is not held; a recorded 0 or
	// negative value is reported as is, although it is never signalled).
	PID int

	// Label is the optional "label" key written by offload-lock (what holds
	// the lock, e.g. a job name), when it is a JSON string; "" otherwise
	// and when not held. It never affects Held.
	Label string

	// StartedAt is the holder's "startedAt" (epoch milliseconds) as a time.
	// It is the zero time.Time when the key is absent or 0, and when not
	// held.
	StartedAt time.Time

	// Host is the optional "host" key written by offload-lock, when it is a
	// JSON string; "" otherwise and when not held. It never affects Held.
	Host string

	// Priority is the holder's queue priority, meta.json's optional
	// "priority" (an integral number, clamped to -100..100); 0 when absent
	// and when not held. It never affects Held.
	Priority int

	// ExpectMs is how long the holder declared it would keep the lock, in
	// milliseconds: meta.json's optional "expectMs" (offload-lock --expect)
	// when it is a positive integral number; 0 (undeclared) otherwise and
	// when not held. It never affects Held.
	ExpectMs int64

	// ExpectedFree is when the holder expects to let the lock go, as
	// offload-lock computes it (info::expected_free_in): the inspection's
	// instant plus ExpectMs minus the time held (from "startedAt" when
	// meta.json has it, else Age), and never earlier than that instant, so
	// an overdue holder is expected free "now". The zero time.Time when
	// unknown: the lock is free, or the holder declared no duration.
	ExpectedFree time.Time

	// Fence is an etcd lock's fencing token (doc/etcd.md): the etcd
	// revision at which its holder took it, greater for every later
	// acquisition. 0 for a lock directory, and when not held.
	Fence uint64
}

// coreMeta is what decides Held. Decoding into exactly these Go types is what
// makes a string pid, a float pid (even 123.0) or a string startedAt an error,
// and so FREE, as in the original reader.
type coreMeta struct {
	Pid       int   `json:"pid"`
	StartedAt int64 `json:"startedAt"`
}

// extraMeta holds the optional keys. They are decoded in a second, separate
// pass whose errors are ignored, so a label of the wrong type can never turn
// a held lock into a free one.
type extraMeta struct {
	Label json.RawMessage `json:"label"`
	Host  json.RawMessage `json:"host"`
}

// Inspect reports whether the lock directory at lockPath is held, with the
// default one-hour TTL. It is read-only: it never creates, reclaims or removes
// anything, and a stale lock is reported as free and left where it is.
//
// Inspect does not block except on the file system (a FIFO planted as
// meta.json blocks it until a writer appears, as os.ReadFile would). It is
// safe for concurrent use.
//
// An etcd lock ("etcd://HOST:PORT[,...]/NAME") is read from etcd instead
// (InspectEtcd); one that cannot be read is reported free here, and
// InspectEtcd says why.
func Inspect(lockPath string) Info {
	if IsEtcd(lockPath) {
		info, _ := InspectEtcd(lockPath)
		return info
	}
	return inspectAt(lockPath, DefaultTTL, time.Now())
}

// InspectTTL is Inspect with an explicit TTL: a meta.json whose mtime is more
// than ttl in the past is stale (free). It is read-only, like Inspect.
func InspectTTL(lockPath string, ttl time.Duration) Info {
	if IsEtcd(lockPath) {
		return Inspect(lockPath) // liveness is etcd's lease, not a TTL of ours
	}
	return inspectAt(lockPath, ttl, time.Now())
}

// pidAlive reports whether the holder pid recorded in meta.json is a live
// process: kill(pid, 0) succeeds, or fails with EPERM (the process exists but
// belongs to another user). A pid <= 0 is never signalled (kill would address
// a process group) and reports false; Inspect does not ask about such pids at
// all, since the original reader skips the check for them and reads the lock
// as held.
//
// Test seam: this is the only liveness check Inspect, InspectTTL and WaitFree
// use, and tests may replace it (for example with func(int) bool { return
// false } for a deterministic dead holder) and restore it when done. Replace
// it only while no inspection runs. Waiters does not use it.
var pidAlive = signalZeroAlive

// inspectAt is InspectTTL as seen at the instant now: Age is now minus the
// meta.json mtime, and the lock is stale when that exceeds ttl. Everything
// else (the file system, and liveness through pidAlive) is read for real.
// Inspect and InspectTTL are inspectAt(lockPath, ttl, time.Now()).
//
// Test seam: it lets a test judge the TTL rule at a fixed clock, such as two
// hours after a meta.json was written, without waiting or touching mtimes.
func inspectAt(lockPath string, ttl time.Duration, now time.Time) Info {
	// Rule 1: the lock is a directory; anything else is free.
	st, err := os.Stat(lockPath)
	if err != nil || !st.IsDir() {
		return Info{}
	}

	// Rule 2: meta.json must be readable and at most maxMetaSize bytes.
	metaPath := filepath.Join(lockPath, metaFileName)
	data, err := readCapped(metaPath, maxMetaSize)
	if err != nil {
		return Info{}
	}

	// Rule 3: strict decode. Any error is free; "null" is not an error.
	var core coreMeta
	if err := json.Unmarshal(data, &core); err != nil {
		return Info{}
	}

	// Rule 4: only a positive pid is checked, through pidAlive (signal 0;
	// EPERM means the process exists but belongs to someone else).
	if core.Pid > 0 && !pidAlive(core.Pid) {
		return Info{}
	}

	// Rule 5: TTL from the meta.json mtime.
	mst, err := os.Stat(metaPath)
	if err != nil {
		return Info{}
	}
	age := now.Sub(mst.ModTime())
	if age > ttl {
		return Info{}
	}

	info := Info{Held: true, Age: age, PID: core.Pid}
	if core.StartedAt != 0 {
		info.StartedAt = time.UnixMilli(core.StartedAt)
	}
	var extra extraMeta
	if json.Unmarshal(data, &extra) == nil {
		info.Label = rawString(extra.Label)
		info.Host = rawString(extra.Host)
	}
	addExpectation(&info, data, now)
	return info
}

// addExpectation fills Priority, ExpectMs and ExpectedFree of a held lock
// from meta.json's "priority", "expectMs" and "startedAt", read as
// offload-lock reads them: keys matched exactly, each an integral JSON
// number (1e3 and 1000.0 count, 1.5 and strings do not) within int64.
// Errors are ignored: these keys never change Held.
func addExpectation(info *Info, data []byte, now time.Time) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil || obj == nil {
		return
	}
	if p, ok := integralNumber(obj["priority"]); ok {
		if p < minPriority {
			p = minPriority
		} else if p > maxPriority {
			p = maxPriority
		}
		info.Priority = int(p)
	}
	e, ok := integralNumber(obj["expectMs"])
	if !ok || e <= 0 {
		return
	}
	info.ExpectMs = e
	// Held for: since startedAt when recorded (0 included), else the age.
	heldFor := info.Age
	if s, ok := integralNumber(obj["startedAt"]); ok {
		heldFor = time.Duration(now.UnixMilli()-s) * time.Millisecond
	}
	left := time.Duration(e)*time.Millisecond - heldFor
	if left < 0 {
		left = 0
	}
	info.ExpectedFree = now.Add(left)
}

// integralNumber returns raw as an int64 when it is a JSON number with an
// integral value that fits: an integer literal within int64, or another
// number (a fraction or exponent) that is finite, whole and below 9e18 in
// magnitude, as offload-lock's meta.json reader takes it.
func integralNumber(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	if isIntegerLiteral(raw) {
		v, err := strconv.ParseInt(string(raw), 10, 64)
		return v, err == nil
	}
	c := raw[0]
	if c != '-' && (c < '0' || c > '9') {
		return 0, false // a string, literal, object or array
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || math.Floor(f) != f || math.Abs(f) >= 9.0e18 {
		return 0, false
	}
	return int64(f), true
}

// signalZeroAlive is the kill(pid, 0) probe: true when it succeeds or fails
// with EPERM; false for pid <= 0, which it never signals.
func signalZeroAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// errTooLarge marks a meta.json over the read cap.
var errTooLarge = errors.New("gpulock: meta.json larger than the read cap")

// readCapped reads the whole file, failing if it holds more than max bytes.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, errTooLarge
	}
	return data, nil
}

// rawString returns raw as a Go string if it is a JSON string, else "".
func rawString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
