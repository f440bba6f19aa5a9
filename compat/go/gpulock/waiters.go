package gpulock

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Waiter is one offload-lock process waiting for the lock, as recorded in the
// waiter registry next to the lock directory.
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
	// maxWaiterEntrySize is the most read of one registry entry; a larger
	// entry is skipped. A real one is a few hundred bytes. The same cap as
	// offload-lock's (waiter_entry_cap, src/waiters.hpp).
	maxWaiterEntrySize = 4096

	// maxWaiterEntries is how many entries (by name) are considered; the
	// rest are ignored.
	maxWaiterEntries = 4096

	// maxGPUSlots bounds "gpu" (0..maxGPUSlots-1) and "gpus" (1..maxGPUSlots).
	maxGPUSlots = 1024

	// maxListedSlots is the most "slots" an entry may list; a longer list
	// is ignored (the wait accepts any of its GPUs).
	maxListedSlots = 64

	// minPriority and maxPriority bound "priority"; values outside are
	// clamped to them.
	minPriority, maxPriority = -100, 100

	// bootIDPath holds the id of the running kernel boot.
	bootIDPath = "/proc/sys/kernel/random/boot_id"

	// pidNamespacePath names this process's pid namespace; its inode number
	// is the namespace's id, as entries record it in "pidNs".
	pidNamespacePath = "/proc/self/ns/pid"

	// fOFDGetlk is F_OFD_GETLK on Linux, which package syscall does not
	// name.
	fOFDGetlk = 36
)

// Waiters lists the offload-lock processes waiting for the lock at lockPath
// (slot 0's path when there are GPU slots), in the order the lock serves
// them: priority (highest first), then arrival (the entry's "queuedUs",
// earliest first), then pid, then entry name. nil when none (or the
// registry cannot be read).
//
// The registry is the directory "<parent>/.<name>.waiters" beside the lock
// "<parent>/<name>", holding one "<pid>-<12 hex>.json" file per waiter. An
// entry counts only while its waiter keeps it open with an OFD write lock on
// it (which only the file's owner can take, so no other user can fake a
// waiter), its name starts with the pid it records, and, unless it was
// written in another pid namespace, it is root's or belongs to the user
// running that pid (another user's entry naming a process here is a
// forgery) and its process still waits: an entry of
// this host whose boot id is not the current boot's, whose pid is dead or a
// zombie, or whose pid now belongs to a later process (another start time)
// is left out. An entry written on another host is judged by its write lock
// alone. These are the rules of offload-lock's own reader
// (registry_reader::live, src/waiters.cpp).
//
// Waiters is read-only: it never creates, modifies or removes anything (the
// write-lock probe, F_OFD_GETLK, takes no lock), and follows no symlink (a
// symlinked registry or entry is ignored). Dead entries stay on disk until
// offload-lock sweeps them. It is safe for concurrent use.
func Waiters(lockPath string) []Waiter {
	dir, ok := waitersDir(lockPath)
	if !ok {
		return nil
	}
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return nil
	}
	// O_NOFOLLOW as well as the Lstat above: a directory swapped for a
	// symlink in between is refused too.
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	d := os.NewFile(uintptr(fd), dir)
	// Directory order, unsorted, as offload-lock reads it: which entries are
	// considered past the cap is then the same on both sides.
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil
	}

	host, _ := os.Hostname()
	boot := currentBootID()
	myNS := currentPidNamespace()
	now := time.Now()

	type entry struct {
		w        Waiter
		name     string
		queuedUs int64
	}
	var found []entry
	seen := 0
	for _, name := range names {
		if !isWaiterEntryName(name) {
			continue
		}
		seen++
		if seen > maxWaiterEntries {
			break
		}
		data, locked, fileUID, err := readEntry(filepath.Join(dir, name))
		if err != nil || !locked {
			continue
		}
		rec, ok := parseWaiterRecord(data)
		if !ok || !strings.HasPrefix(name, strconv.FormatInt(rec.pid, 10)+"-") {
			continue
		}
		// A pid of another pid namespace names another process here (or
		// none): the write lock alone proves that waiter alive.
		otherNS := rec.pidNS != 0 && myNS != 0 && rec.pidNS != myNS
		// Only a file of the process's own user (or root's) speaks for it:
		// another user's entry naming this process is a forgery.
		if !otherNS && fileUID != 0 {
			if owner, ok := processUID(int(rec.pid)); ok && owner != fileUID {
				continue
			}
		}
		if !otherNS && !rec.waiting(host, boot) {
			continue
		}
		since := time.UnixMilli(rec.since)
		// A missing or nonsensical start (0, negative, in the future) reads
		// as no time waited, as offload-lock shows it.
		waited := now.Sub(since)
		if rec.since <= 0 || waited < 0 {
			waited = 0
		}
		found = append(found, entry{
			w: Waiter{
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
			},
			name:     name,
			queuedUs: rec.queuedUs,
		})
	}
	if len(found) == 0 {
		return nil
	}
	sort.Slice(found, func(i, j int) bool {
		a, b := &found[i], &found[j]
		if a.w.Priority != b.w.Priority {
			return a.w.Priority > b.w.Priority
		}
		if a.queuedUs != b.queuedUs {
			return a.queuedUs < b.queuedUs
		}
		if a.w.PID != b.w.PID {
			return a.w.PID < b.w.PID
		}
		return a.name < b.name
	})
	out := make([]Waiter, len(found))
	for k := range found {
		out[k] = found[k].w
		out[k].Position = 1
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

// waitersDir returns the registry directory of the lock at lockPath, splitting
// the path as offload-lock does: trailing slashes dropped, the last component
// is the lock's name and the rest (or ".") its parent. Not cleaned otherwise.
// ok is false when the path names no directory ("" or "/").
func waitersDir(lockPath string) (dir string, ok bool) {
	p := lockPath
	for len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	if p == "" || p == "/" {
		return "", false
	}
	parent, name := ".", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		parent, name = p[:i], p[i+1:]
		if i == 0 {
			parent = "/"
		}
	}
	return filepath.Join(parent, "."+name+".waiters"), true
}

// isWaiterEntryName reports whether name is a complete registry entry,
// "<decimal pid>-<12 lowercase hex>.json". Entries being written are named
// ".<pid>-<hex>.tmp" and are not complete; nor is any other name.
func isWaiterEntryName(name string) bool {
	s := strings.TrimSuffix(name, ".json")
	if len(s) == len(name) {
		return false
	}
	dash := strings.IndexByte(s, '-')
	if dash <= 0 || len(s)-dash-1 != 12 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i < dash:
			if c < '0' || c > '9' {
				return false
			}
		case i > dash:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// errNotRegular marks a registry entry that is not a regular file.
var errNotRegular = errors.New("gpulock: registry entry is not a regular file")

// readEntry reads one registry entry without following a symlink and without
// blocking on a FIFO, failing if it is not a regular file or holds more than
// maxWaiterEntrySize bytes. locked reports whether someone holds a write
// lock on it (see writeLocked); uid is the file's owner.
func readEntry(path string) (data []byte, locked bool, uid uint32, err error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, false, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, false, 0, errNotRegular
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, 0, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	// Checked again on what was opened, in case the name changed meanwhile.
	var fst syscall.Stat_t
	if err := syscall.Fstat(fd, &fst); err != nil || fst.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, false, 0, errNotRegular
	}
	locked = writeLocked(fd)
	data, err = io.ReadAll(io.LimitReader(f, maxWaiterEntrySize+1))
	if err != nil {
		return nil, false, 0, err
	}
	if len(data) > maxWaiterEntrySize {
		return nil, false, 0, errTooLarge
	}
	return data, locked, fst.Uid, nil
}

// writeLocked reports whether another open file description holds a write
// lock on the file open at fd: F_OFD_GETLK asks for a read lock over the
// whole file and reports F_UNLCK when nothing conflicts, and only a write
// lock conflicts with a read lock. It takes no lock itself. A failed probe
// reads as not locked, as offload-lock judges it.
func writeLocked(fd int) bool {
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: 0, Start: 0, Len: 0}
	for {
		err := syscall.FcntlFlock(uintptr(fd), fOFDGetlk, &lk)
		if err == syscall.EINTR {
			continue
		}
		return err == nil && lk.Type != syscall.F_UNLCK
	}
}

// waiterRecord is one decoded registry entry.
type waiterRecord struct {
	pid       int64
	label     string
	host      string
	bootID    string
	since     int64
	procTicks uint64
	gpu       int
	gpus      int
	priority  int
	expectMs  int64
	queuedUs  int64
	pidNS     uint64
	slots     []int
}

// utf8BOM is skipped at the start of an entry, as offload-lock's JSON parser
// does.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// parseWaiterRecord decodes an entry as offload-lock does: it must be one JSON
// object (valid UTF-8 without unpaired surrogate escapes, nothing after it,
// an optional leading byte-order mark) whose "pid" is an integer literal in
// 1..2^31-1. Keys are matched exactly (case-sensitively); of a repeated key
// the last counts. Every other key is optional and falls back to its default
// when absent or of another type: label, host and bootId "" unless strings;
// since 0 unless an integer (2^63..2^64-1 wrap round to negative values);
// procTicks 0 unless a non-negative integer; gpu -1 unless an integer in
// 0..1023 (null included); gpus 1 unless an integer in 1..1024; priority 0
// unless an integer, clamped to -100..100; expectMs 0 unless a positive
// integer; queuedUs 0 unless an integer; pidNs 0 unless a non-negative
// integer; slots nil unless an array of at most 64, keeping its integers in
// 0..1023. Integers of 2^63..2^64-1 wrap round to negative values wherever
// a signed one is read, as in offload-lock.
func parseWaiterRecord(data []byte) (waiterRecord, bool) {
	data = bytes.TrimPrefix(data, utf8BOM)
	// encoding/json would replace invalid UTF-8 and unpaired surrogate
	// escapes with U+FFFD; offload-lock rejects the entry.
	if !utf8.Valid(data) || hasUnpairedSurrogate(data) {
		return waiterRecord{}, false
	}
	var obj map[string]json.RawMessage
	// A top-level null decodes into a nil map without error: not an object.
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return waiterRecord{}, false
	}
	pid, ok := rawInt(obj["pid"])
	if !ok || pid <= 0 || pid > 1<<31-1 {
		return waiterRecord{}, false
	}
	r := waiterRecord{pid: pid, gpu: -1, gpus: 1}
	r.label = rawString(obj["label"])
	r.host = rawString(obj["host"])
	r.bootID = rawString(obj["bootId"])
	if v, ok := rawWrappedInt(obj["since"]); ok {
		r.since = v
	}
	if v, ok := rawUint(obj["procTicks"]); ok {
		r.procTicks = v
	}
	if v, ok := rawInt(obj["gpu"]); ok && v >= 0 && v < maxGPUSlots {
		r.gpu = int(v)
	}
	if v, ok := rawInt(obj["gpus"]); ok && v >= 1 && v <= maxGPUSlots {
		r.gpus = int(v)
	}
	if v, ok := rawWrappedInt(obj["priority"]); ok {
		if v < minPriority {
			v = minPriority
		} else if v > maxPriority {
			v = maxPriority
		}
		r.priority = int(v)
	}
	if v, ok := rawWrappedInt(obj["expectMs"]); ok && v > 0 {
		r.expectMs = v
	}
	if v, ok := rawWrappedInt(obj["queuedUs"]); ok {
		r.queuedUs = v
	}
	if v, ok := rawUint(obj["pidNs"]); ok {
		r.pidNS = v
	}
	var slots []json.RawMessage
	if json.Unmarshal(obj["slots"], &slots) == nil && len(slots) <= maxListedSlots {
		for _, raw := range slots {
			if v, ok := rawInt(raw); ok && v >= 0 && v < maxGPUSlots {
				r.slots = append(r.slots, int(v))
			}
		}
	}
	return r, true
}

// hasUnpairedSurrogate reports whether data (syntactically valid JSON) holds
// a \uD800-\uDFFF escape that is not a high surrogate followed directly by
// a low one. Backslashes occur only inside strings, so every one starts an
// escape.
func hasUnpairedSurrogate(data []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // a two-character escape such as \\ or \"
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

// rawInt returns raw as an int64 when it is a JSON integer literal (no
// fraction or exponent: 3.0 and 1e2 are not integers) that fits.
func rawInt(raw json.RawMessage) (int64, bool) {
	if !isIntegerLiteral(raw) {
		return 0, false
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	return v, err == nil
}

// rawWrappedInt returns raw as an int64 when it is a JSON integer literal
// that fits an int64 or a uint64; 2^63 and up wrap round to negative values,
// as offload-lock reads them.
func rawWrappedInt(raw json.RawMessage) (int64, bool) {
	if v, ok := rawInt(raw); ok {
		return v, true
	}
	if u, ok := rawUint(raw); ok {
		return int64(u), true
	}
	return 0, false
}

// rawUint returns raw as a uint64 when it is a non-negative JSON integer
// literal that fits.
func rawUint(raw json.RawMessage) (uint64, bool) {
	if !isIntegerLiteral(raw) || raw[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	return v, err == nil
}

// isIntegerLiteral reports whether raw (one JSON value, as json.RawMessage
// holds it after decoding) is a number without fraction or exponent.
func isIntegerLiteral(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	s := raw
	if s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// waiting reports whether the process that wrote r still waits, as far as
// this host can tell. host and boot are this host's name and boot id ("" when
// unknown).
func (r waiterRecord) waiting(host, boot string) bool {
	if r.pid <= 0 || r.pid > 1<<31-1 {
		return false
	}
	// Another host's process cannot be checked: taken at its word.
	if r.host != "" && r.host != host {
		return true
	}
	// Written before this boot: its process is gone.
	if r.bootID != "" && boot != "" && r.bootID != boot {
		return false
	}
	pid := int(r.pid)
	if !processRunning(pid) {
		return false
	}
	if r.procTicks != 0 {
		// A pid now running with another start time was reused. When the
		// start time cannot be read, the probe above decides alone.
		if _, ticks, ok := readProcStat(pid); ok && ticks != r.procTicks {
			return false
		}
	}
	return true
}

// processRunning reports whether pid is a running process: kill(pid, 0)
// succeeds or fails with EPERM (it exists but belongs to someone else), as
// Inspect judges a holder, and it is not a zombie (exited, not yet reaped),
// which kill(pid, 0) cannot tell.
func processRunning(pid int) bool {
	// The probe itself, not the replaceable pidAlive: stubbing Inspect's
	// liveness in a test must not change what Waiters lists.
	if !signalZeroAlive(pid) {
		return false
	}
	if state, _, ok := readProcStat(pid); ok && (state == 'Z' || state == 'X') {
		return false
	}
	return true
}

// readProcStat returns the state letter (field 3) and the start time in clock
// ticks since boot (field 22) from /proc/<pid>/stat. The command name (field
// 2) is in parentheses and may itself hold spaces and ')', so the fields are
// counted from after the last ')'. ok is false when the file cannot be read
// or parsed.
func readProcStat(pid int) (state byte, startTicks uint64, ok bool) {
	data, err := readCapped("/proc/"+strconv.Itoa(pid)+"/stat", 4096)
	if err != nil {
		return 0, 0, false
	}
	paren := bytes.LastIndexByte(data, ')')
	if paren < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(data[paren+1:]))
	// fields[0] is field 3 (state), fields[19] is field 22 (starttime).
	if len(fields) < 20 {
		return 0, 0, false
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], ticks, true
}

// processUID returns the owner of /proc/<pid> (the process's effective uid;
// root for one that is not dumpable). ok is false when it cannot be read,
// or when /proc is not of this process's pid namespace (its pids would name
// other processes).
func processUID(pid int) (uid uint32, ok bool) {
	if pid <= 0 || !procIsOwn() {
		return 0, false
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil {
		return 0, false
	}
	return st.Uid, true
}

// procIsOwn reports whether /proc shows this process's pid namespace:
// /proc/self names this process's pid.
func procIsOwn() bool {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(self)
	return err == nil && pid == os.Getpid()
}

// currentPidNamespace returns the id of this process's pid namespace (the
// inode number of /proc/self/ns/pid), or 0 when it cannot be read.
func currentPidNamespace() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(pidNamespacePath, &st); err != nil {
		return 0
	}
	return st.Ino
}

// currentBootID returns this boot's id, trimmed, or "" when it cannot be read.
func currentBootID() string {
	data, err := readCapped(bootIDPath, 4096)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
