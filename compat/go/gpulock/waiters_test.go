package gpulock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The queue's registry is written by hand in each test's t.TempDir(): the
// lock is <tmp>/gpu.lock, its registry <tmp>/.gpu.lock.queue, and this
// user's directory in it u<euid>, as offload-lock names them.

const (
	// farPID+n is the pid of an entry from another host: above any pid
	// this kernel can hand out (PID_MAX_LIMIT), so that no local process,
	// of whatever owner, is named by it.
	farPID = 4194304

	// otherUID owns the directories and entries of "another user" (the
	// rows that give files away, as root only).
	otherUID = 65534

	regLockName = "gpu.lock"
	regDirName  = ".gpu.lock.queue"
	sinceBase   = int64(1764470000000)
)

// ownDir is this user's directory in the registry, as offload-lock makes it.
func ownDir() string { return "u" + strconv.Itoa(os.Geteuid()) }

// entryName is a well-formed registry entry name for pid; n makes it unique.
func entryName(pid, n int) string {
	return fmt.Sprintf("%d-%012x.json", pid, n)
}

func thisHost(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil || h == "" {
		t.Skipf("no host name: %v", err)
	}
	return h
}

// zombiePID returns the pid of a child that has exited but is not reaped yet;
// it is reaped when the test ends.
func zombiePID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting true: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil {
			s := string(data)
			if f := strings.Fields(s[strings.LastIndex(s, ")")+1:]); len(f) > 0 && f[0] == "Z" {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d never became a zombie", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// rec builds an entry's JSON as offload-lock writes it; fields set to "" in
// over are left out, others replace the default text of that key.
type rec struct {
	pid   string // JSON text of "pid"
	label string
	host  string
	since int64
	gpu   string // JSON text; "" means null
	gpus  string // JSON text; "" means 1
	// more is raw JSON text of further keys, each with its leading comma
	// (`,"priority":5`).
	more string
}

func (r rec) json() string {
	gpu, gpus := r.gpu, r.gpus
	if gpu == "" {
		gpu = "null"
	}
	if gpus == "" {
		gpus = "1"
	}
	return fmt.Sprintf(`{"pid":%s,"label":%q,"host":%q,"since":%d,"gpu":%s,"gpus":%s%s}`,
		r.pid, r.label, r.host, r.since, gpu, gpus, r.more) + "\n"
}

// file is one name to create in a registry.
type file struct {
	// in is the directory of the registry it goes in: "" for this user's
	// (ownDir), "." for the registry itself.
	in   string
	name string
	data string
	// link, when set, makes name a symlink to this target instead.
	link string
	// fifo makes name a FIFO; dir makes it a directory.
	fifo, dir bool
	// A regular file is kept write-locked (an OFD lock of this test
	// process, as a live waiter keeps its entry) until the test ends,
	// unless unlocked; readLocked puts a read lock on it instead.
	unlocked, readLocked bool
	// chown, when not 0, gives the file or directory to that uid (as root
	// only).
	chown int
	// mode, when not 0, is a regular file's mode instead of 0644.
	mode os.FileMode
}

// writeRegistry creates the registry top (a directory beside the lock, and
// this user's directory in it) and the files, in order. The regular files
// get strictly increasing ctimes in that order (their arrival, as
// offload-lock reads it): the clock that stamps ctime is coarse (a kernel
// tick), so a file stamped like the one before is stamped again until it is
// later.
func writeRegistry(t *testing.T, top string, files []file) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(top, ownDir()), 0o755); err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, f := range files {
		in := f.in
		if in == "" {
			in = ownDir()
		}
		p := filepath.Join(top, in, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case f.link != "":
			err = os.Symlink(f.link, p)
		case f.fifo:
			err = syscall.Mkfifo(p, 0o600)
		case f.dir:
			err = os.Mkdir(p, 0o755)
		default:
			mode := f.mode
			if mode == 0 {
				mode = 0o644
			}
			err = os.WriteFile(p, []byte(f.data), 0o644)
			if err == nil {
				err = os.Chmod(p, mode)
			}
			if err == nil && !f.unlocked {
				lockEntry(t, p, f.readLocked)
			}
			if err == nil {
				last = laterCtime(t, p, last, mode)
			}
		}
		if err == nil && f.chown != 0 {
			err = os.Lchown(p, f.chown, f.chown)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// ctimeNs is the ctime of p in nanoseconds.
func ctimeNs(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Ctim.Sec)*1e9 + int64(st.Ctim.Nsec)
}

// laterCtime stamps p's ctime again (chmod always sets it) until it is later
// than after, and returns it. A kernel tick is a few milliseconds; the bound
// only stops a clock that never moves.
func laterCtime(t *testing.T, p string, after int64, mode os.FileMode) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c := ctimeNs(t, p); c > after {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ctime of %s never passed %d", p, after)
		}
		time.Sleep(500 * time.Microsecond)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// fOFDSetlk is F_OFD_SETLK on Linux.
const fOFDSetlk = 37

// lockEntry takes an OFD lock on the whole file at p (a write lock, or a
// read lock when read is set) through a descriptor of its own, held until
// the test ends. An OFD lock belongs to that open file description, so the
// package's probe through another descriptor sees it even from this same
// process, as it sees a waiter's.
func lockEntry(t *testing.T, p string, read bool) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	if read {
		lk.Type = syscall.F_RDLCK
	}
	if err := syscall.FcntlFlock(f.Fd(), fOFDSetlk, &lk); err != nil {
		t.Fatalf("F_OFD_SETLK on %s: %v", p, err)
	}
}

// qwant is a Waiter's place in the queue.
type qwant struct {
	pid      int
	position int
	priority int
	expectMs int64
}

func gotQueue(ws []Waiter) []qwant {
	var out []qwant
	for _, w := range ws {
		out = append(out, qwant{w.PID, w.Position, w.Priority, w.ExpectMs})
	}
	return out
}

// want is the expected part of a Waiter (Waited is checked separately).
type want struct {
	pid   int
	label string
	host  string
	since int64
	gpu   int
	gpus  int
}

func (w want) String() string {
	return fmt.Sprintf("{pid %d label %q host %q since %d gpu %d gpus %d}", w.pid, w.label, w.host, w.since, w.gpu, w.gpus)
}

func gotWants(ws []Waiter) []want {
	var out []want
	for _, w := range ws {
		out = append(out, want{w.PID, w.Label, w.Host, w.Since.UnixMilli(), w.GPU, w.GPUs})
	}
	return out
}

// waiterCase is one hand-written registry and the waiters it holds.
type waiterCase struct {
	name  string
	files []file
	// noDir: the registry directory is not created at all.
	noDir bool
	// needRoot: the row gives files away.
	needRoot bool
	want     []want
	// queue, when not nil, is each waiter's place in the queue, in order.
	queue []qwant
}

// waiterCases builds the table rows. Its entries refer to this test process
// (alive), a reaped child (dead) and an unreaped one (zombie, reaped when
// the test ends).
func waiterCases(t *testing.T) (cases []waiterCase, liveJSON string) {
	t.Helper()
	self := os.Getpid()
	selfS := strconv.Itoa(self)
	host := thisHost(t)
	dead := deadPID(t)
	zombie := zombiePID(t)

	// live is an entry of this test process, as offload-lock would write it
	// for itself.
	live := rec{pid: selfS, label: "live", host: host, since: sinceBase}
	liveWant := want{self, "live", host, sinceBase, -1, 1}
	with := func(r rec, edit func(*rec)) rec { edit(&r); return r }
	one := func(r rec) []file { return []file{{name: entryName(self, 1), data: r.json()}} }
	raw := func(s string) []file { return []file{{name: entryName(self, 1), data: s}} }

	// An entry exactly at the read cap is read; one byte more is skipped.
	liveJSON = live.json()
	atCap := liveJSON + strings.Repeat(" ", maxWaiterEntrySize-len(liveJSON))
	overCap := atCap + " "

	cases = []waiterCase{
		{name: "no registry directory", noDir: true},
		{name: "empty registry"},
		{name: "live entry", files: one(live), want: []want{liveWant}},
		{name: "live entry without host", files: one(with(live, func(r *rec) { r.host = "" })),
			want: []want{{self, "live", "", sinceBase, -1, 1}}},
		{name: "minimal object", files: raw(`{"pid":` + selfS + `}`), want: []want{{self, "", "", 0, -1, 1}}},
		// The write lock alone proves the waiter: its pid, host and the keys
		// an older offload-lock judged liveness by do not count.
		{name: "dead pid, write-locked", files: []file{{name: entryName(dead, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead) }).json()}},
			want: []want{{dead, "live", host, sinceBase, -1, 1}}},
		{name: "zombie pid, write-locked", files: []file{{name: entryName(zombie, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(zombie) }).json()}},
			want: []want{{zombie, "live", host, sinceBase, -1, 1}}},
		{name: "old liveness keys ignored", files: one(with(live, func(r *rec) {
			r.more = `,"bootId":"00000000-0000-0000-0000-000000000000","procTicks":1,"queuedUs":-5,"pidNs":7`
		})), want: []want{liveWant}},
		{name: "other host", files: []file{{name: entryName(dead, 1), data: rec{pid: strconv.Itoa(dead), label: "far", host: host + "-elsewhere", since: sinceBase}.json()}},
			want: []want{{dead, "far", host + "-elsewhere", sinceBase, -1, 1}}},
		{name: "wake channel beside the entry is never opened", files: []file{
			{name: strings.TrimSuffix(entryName(self, 1), ".json") + ".wake", fifo: true},
			{name: entryName(self, 1), data: liveJSON},
		}, want: []want{liveWant}},

		// Names: only "<pid>-<12 lowercase hex>.json" is read.
		{name: "bad names and files being written", files: []file{
			{name: "." + strings.TrimSuffix(entryName(self, 1), ".json") + ".tmp", data: liveJSON},
			{name: "." + entryName(self, 2), data: liveJSON},
			{name: strings.TrimSuffix(entryName(self, 3), ".json") + ".tmp", data: liveJSON},
			{name: selfS + "-0123456789AB.json", data: liveJSON},
			{name: selfS + "-0123456789a.json", data: liveJSON},
			{name: selfS + "-0123456789abc.json", data: liveJSON},
			{name: selfS + "-0123456789ag.json", data: liveJSON},
			{name: "-0123456789ab.json", data: liveJSON},
			{name: "x" + selfS + "-0123456789ab.json", data: liveJSON},
			{name: "+" + selfS + "-0123456789ab.json", data: liveJSON},
			{name: selfS + "-0123456789ab.JSON", data: liveJSON},
			{name: selfS + "-0123456789ab.json.bak", data: liveJSON},
			{name: selfS + "-0123456789ab", data: liveJSON},
			{name: selfS + "_0123456789ab.json", data: liveJSON},
			{name: "meta.json", data: liveJSON},
		}},
		{name: "good name beside bad ones", files: []file{
			{name: "." + strings.TrimSuffix(entryName(self, 1), ".json") + ".tmp", data: liveJSON},
			{name: entryName(self, 2), data: liveJSON},
			{name: selfS + "-0123456789AB.json", data: liveJSON},
		}, want: []want{liveWant}},
		{name: "pid in the name must be the entry's", files: []file{{name: entryName(dead, 1), data: liveJSON}}},
		// The name's digits are read as a number, at most 10 of them.
		{name: "pid in the name with a leading zero", files: []file{{name: "0" + entryName(self, 1), data: liveJSON}}, want: []want{liveWant}},
		{name: "pid in the name of 10 digits", files: []file{{name: fmt.Sprintf("%010d-%012x.json", self, 1), data: liveJSON}}, want: []want{liveWant}},
		{name: "pid in the name of 11 digits", files: []file{{name: fmt.Sprintf("%011d-%012x.json", self, 1), data: liveJSON}}},

		// The write lock is the proof of life.
		{name: "entry not write-locked", files: []file{{name: entryName(self, 1), data: liveJSON, unlocked: true}}},
		{name: "entry only read-locked", files: []file{{name: entryName(self, 1), data: liveJSON, readLocked: true}}},
		{name: "not write-locked, whatever it says", files: []file{{name: entryName(dead, 1), unlocked: true,
			data: rec{pid: strconv.Itoa(dead), label: "far", host: host + "-elsewhere", since: sinceBase}.json()}}},
		{name: "locked entry beside an unlocked one", files: []file{
			{name: entryName(self, 1), data: with(live, func(r *rec) { r.label = "gone"; r.more = `,"priority":50` }).json(), unlocked: true},
			{name: entryName(self, 2), data: liveJSON},
		}, want: []want{liveWant}, queue: []qwant{{self, 1, 0, 0}}},

		// A directory speaks for its owner, by owner not by name, and holds
		// only its owner's entries; and only root's entries may name a
		// process of another user.
		{name: "another user's file in this user's directory", needRoot: true,
			files: []file{{name: entryName(farPID, 1), data: rec{pid: strconv.Itoa(farPID), host: "far"}.json(), chown: otherUID}}},
		{name: "this user's file in another user's directory", needRoot: true, files: []file{
			{in: ".", name: "u" + strconv.Itoa(otherUID), dir: true, chown: otherUID},
			{in: "u" + strconv.Itoa(otherUID), name: entryName(farPID, 1), data: rec{pid: strconv.Itoa(farPID), host: "far"}.json()},
		}},
		{name: "another user's entry for a pid that is not here", needRoot: true, files: []file{
			{in: ".", name: "u" + strconv.Itoa(otherUID), dir: true, chown: otherUID},
			{in: "u" + strconv.Itoa(otherUID), name: entryName(farPID, 1), data: rec{pid: strconv.Itoa(farPID), label: "far", host: "far"}.json(), chown: otherUID},
		}, want: []want{{farPID, "far", "far", 0, -1, 1}}},
		{name: "another user's entry for this process", needRoot: true, files: []file{
			{in: ".", name: "u" + strconv.Itoa(otherUID), dir: true, chown: otherUID},
			{in: "u" + strconv.Itoa(otherUID), name: entryName(self, 1), data: liveJSON, chown: otherUID},
		}},
		{name: "a directory of any name speaks for its owner", needRoot: true, files: []file{
			{in: ".", name: "not-a-uid", dir: true, chown: otherUID},
			{in: "not-a-uid", name: entryName(farPID, 1), data: rec{pid: strconv.Itoa(farPID), label: "far", host: "far"}.json(), chown: otherUID},
		}, want: []want{{farPID, "far", "far", 0, -1, 1}}},
		{name: "this user's entries in two directories", files: []file{
			{in: ".", name: ownDir() + "-0a0b", dir: true},
			{in: ownDir() + "-0a0b", name: entryName(farPID+2, 2), data: rec{pid: strconv.Itoa(farPID + 2), label: "second", host: "far"}.json()},
			{name: entryName(farPID+1, 1), data: rec{pid: strconv.Itoa(farPID + 1), label: "third", host: "far"}.json()},
		}, want: []want{{farPID + 2, "second", "far", 0, -1, 1}, {farPID + 1, "third", "far", 0, -1, 1}}},
		{name: "entry in the registry itself", files: []file{{in: ".", name: entryName(self, 1), data: liveJSON}}},
		{name: "symlinked user directory", files: []file{
			{in: ".", name: "elsewhere", link: "../real-dir"},
		}},

		// Size.
		{name: "entry at the 4 KiB cap", files: raw(atCap), want: []want{liveWant}},
		{name: "entry over the 4 KiB cap", files: raw(overCap)},

		// Content that is not one object with a positive int pid.
		{name: "empty file", files: raw("")},
		{name: "array", files: raw(`[` + liveJSON + `]`)},
		{name: "null", files: raw("null")},
		{name: "number", files: raw(selfS)},
		{name: "string", files: raw(`"` + selfS + `"`)},
		{name: "garbage", files: raw("not json")},
		{name: "truncated object", files: raw(liveJSON[:len(liveJSON)/2])},
		{name: "trailing garbage", files: raw(strings.TrimSpace(liveJSON) + " x")},
		{name: "two objects", files: raw(liveJSON + liveJSON)},
		{name: "invalid UTF-8", files: raw(`{"pid":` + selfS + `,"label":"a` + "\xff" + `"}`)},
		{name: "lone high surrogate escape", files: raw(`{"pid":` + selfS + `,"label":"a\ud800b"}`)},
		{name: "lone low surrogate escape", files: raw(`{"pid":` + selfS + `,"label":"a\udc00"}`)},
		{name: "high surrogate then a non-surrogate", files: raw(`{"pid":` + selfS + `,"host":"\ud800\u0041"}`)},
		{name: "surrogate pair", files: raw(`{"pid":` + selfS + `,"label":"\ud83d\ude00"}`), want: []want{{self, "\U0001F600", "", 0, -1, 1}}},
		{name: "escaped backslash before u", files: raw(`{"pid":` + selfS + `,"label":"\\ud800"}`), want: []want{{self, `\ud800`, "", 0, -1, 1}}},
		{name: "UTF-8 BOM is skipped", files: raw("\xEF\xBB\xBF" + liveJSON), want: []want{liveWant}},
		{name: "pid missing", files: raw(`{"label":"x"}`)},
		{name: "pid as string", files: one(with(live, func(r *rec) { r.pid = `"` + selfS + `"` }))},
		{name: "pid null", files: one(with(live, func(r *rec) { r.pid = "null" }))},
		{name: "pid 0", files: one(with(live, func(r *rec) { r.pid = "0" }))},
		{name: "pid -0", files: one(with(live, func(r *rec) { r.pid = "-0" }))},
		{name: "pid negative", files: one(with(live, func(r *rec) { r.pid = "-" + selfS }))},
		{name: "pid -1", files: one(with(live, func(r *rec) { r.pid = "-1" }))},
		{name: "pid float", files: one(with(live, func(r *rec) { r.pid = selfS + ".5" }))},
		{name: "pid integral float", files: one(with(live, func(r *rec) { r.pid = selfS + ".0" }))},
		{name: "pid exponent", files: one(with(live, func(r *rec) { r.pid = selfS + "e0" }))},
		{name: "pid 2^31", files: one(with(live, func(r *rec) { r.pid = "2147483648"; r.host = host + "-elsewhere" }))},
		{name: "pid 2^31-1 (other host)", files: []file{{name: entryName(2147483647, 1), data: with(live, func(r *rec) { r.pid = "2147483647"; r.host = "far" }).json()}},
			want: []want{{2147483647, "live", "far", sinceBase, -1, 1}}},
		{name: "pid 2^64", files: one(with(live, func(r *rec) { r.pid = "18446744073709551616"; r.host = "far" }))},
		{name: "key PID is not pid", files: raw(`{"PID":` + selfS + `}`)},
		{name: "last duplicate pid wins", files: raw(`{"pid":` + selfS + `,"pid":"x"}`)},
		{name: "label not a string", files: raw(`{"pid":` + selfS + `,"label":7,"host":["h"]}`), want: []want{{self, "", "", 0, -1, 1}}},
		{name: "since negative", files: raw(`{"pid":` + selfS + `,"since":-5}`), want: []want{{self, "", "", -5, -1, 1}}},
		{name: "since 2^63 wraps", files: raw(`{"pid":` + selfS + `,"since":9223372036854775808}`), want: []want{{self, "", "", -1 << 63, -1, 1}}},
		{name: "since float is ignored", files: raw(`{"pid":` + selfS + `,"since":1.5}`), want: []want{{self, "", "", 0, -1, 1}}},

		// gpu and gpus.
		{name: "gpu null", files: one(with(live, func(r *rec) { r.gpu = "null" })), want: []want{liveWant}},
		{name: "gpu 0", files: one(with(live, func(r *rec) { r.gpu = "0" })), want: []want{{self, "live", host, sinceBase, 0, 1}}},
		{name: "gpu 3 of 4", files: one(with(live, func(r *rec) { r.gpu, r.gpus = "3", "4" })), want: []want{{self, "live", host, sinceBase, 3, 4}}},
		{name: "gpu 1023 gpus 1024", files: one(with(live, func(r *rec) { r.gpu, r.gpus = "1023", "1024" })), want: []want{{self, "live", host, sinceBase, 1023, 1024}}},
		{name: "gpu 1024 gpus 1025", files: one(with(live, func(r *rec) { r.gpu, r.gpus = "1024", "1025" })), want: []want{liveWant}},
		{name: "gpu -1 gpus 0", files: one(with(live, func(r *rec) { r.gpu, r.gpus = "-1", "0" })), want: []want{liveWant}},
		{name: "gpu -2 gpus -3", files: one(with(live, func(r *rec) { r.gpu, r.gpus = "-2", "-3" })), want: []want{liveWant}},
		{name: "gpu and gpus as strings", files: one(with(live, func(r *rec) { r.gpu, r.gpus = `"2"`, `"4"` })), want: []want{liveWant}},
		{name: "gpu and gpus as floats", files: one(with(live, func(r *rec) { r.gpu, r.gpus = "2.0", "4.0" })), want: []want{liveWant}},
		{name: "gpus without gpu", files: one(with(live, func(r *rec) { r.gpus = "8" })), want: []want{{self, "live", host, sinceBase, -1, 8}}},

		// priority and expectMs, read as offload-lock reads them.
		{name: "priority and expectMs", files: one(with(live, func(r *rec) { r.more = `,"priority":7,"expectMs":60000` })),
			want: []want{liveWant}, queue: []qwant{{self, 1, 7, 60000}}},
		{name: "priority clamped high", files: one(with(live, func(r *rec) { r.more = `,"priority":500` })), queue: []qwant{{self, 1, 100, 0}}, want: []want{liveWant}},
		// The owner's execute bit says priority 0 (offload-lock writes it so
		// and places such entries by their mode); a record that says
		// otherwise makes the file no entry.
		{name: "mode says priority 0, as the record does", files: []file{{name: entryName(self, 1), data: liveJSON, mode: 0o744}}, want: []want{liveWant}},
		{name: "mode says priority 0, the record 5", files: []file{{name: entryName(self, 1), data: with(live, func(r *rec) { r.more = `,"priority":5` }).json(), mode: 0o744}}},
		{name: "priority clamped low", files: one(with(live, func(r *rec) { r.more = `,"priority":-101` })), queue: []qwant{{self, 1, -100, 0}}, want: []want{liveWant}},
		{name: "priority 2^64-1 wraps", files: one(with(live, func(r *rec) { r.more = `,"priority":18446744073709551615` })), queue: []qwant{{self, 1, -1, 0}}, want: []want{liveWant}},
		{name: "priority not an integer", files: one(with(live, func(r *rec) { r.more = `,"priority":1.5,"expectMs":"60000"` })), queue: []qwant{{self, 1, 0, 0}}, want: []want{liveWant}},
		{name: "priority integral float ignored", files: one(with(live, func(r *rec) { r.more = `,"priority":5.0,"expectMs":6e4` })), queue: []qwant{{self, 1, 0, 0}}, want: []want{liveWant}},
		{name: "expectMs 0, negative, null", files: []file{
			{name: entryName(self, 1), data: with(live, func(r *rec) { r.more = `,"expectMs":0` }).json()},
			{name: entryName(self, 2), data: with(live, func(r *rec) { r.more = `,"expectMs":-5` }).json()},
			{name: entryName(self, 3), data: with(live, func(r *rec) { r.more = `,"expectMs":null` }).json()},
		}, want: []want{liveWant, liveWant, liveWant}, queue: []qwant{{self, 1, 0, 0}, {self, 2, 0, 0}, {self, 3, 0, 0}}},

		// Serving order: priority, then arrival (the entries are written in
		// this order, each stamped later than the one before); since and
		// the names do not count. Positions per slot; a wait among slots
		// has none.
		{name: "served by priority, then arrival", files: []file{
			{name: entryName(4194312, 9), data: rec{pid: "4194312", label: "h", host: "far", since: sinceBase, gpus: "2"}.json()},
			{name: entryName(4194313, 10), data: rec{pid: "4194313", label: "i", host: "far", since: sinceBase, gpu: "1", gpus: "2"}.json()},
			{name: entryName(4194344, 4), data: rec{pid: "4194344", label: "a", host: "far", since: sinceBase + 900}.json()},
			{name: entryName(4194354, 2), data: rec{pid: "4194354", label: "b", host: "far", since: sinceBase + 100}.json()},
			{name: entryName(self, 3), data: with(live, func(r *rec) { r.label = "d"; r.more = `,"priority":-10` }).json()},
			{name: entryName(self, 1), data: with(live, func(r *rec) { r.label = "c"; r.since = 1 }).json()},
			{name: entryName(self, 5), data: with(live, func(r *rec) { r.label = "gone"; r.more = `,"priority":99` }).json(), unlocked: true},
			{name: entryName(4194364, 6), data: rec{pid: "4194364", label: "e", host: "far", since: sinceBase, more: `,"priority":10,"expectMs":5000`}.json()},
			{name: entryName(4194311, 8), data: rec{pid: "4194311", label: "f", host: "far", since: sinceBase, gpu: "1", gpus: "2"}.json()},
			{name: entryName(4194311, 7), data: rec{pid: "4194311", label: "g", host: "far", since: sinceBase}.json()},
		}, want: []want{
			{4194364, "e", "far", sinceBase, -1, 1},
			{4194312, "h", "far", sinceBase, -1, 2},
			{4194313, "i", "far", sinceBase, 1, 2},
			{4194344, "a", "far", sinceBase + 900, -1, 1},
			{4194354, "b", "far", sinceBase + 100, -1, 1},
			{self, "c", host, 1, -1, 1},
			{4194311, "f", "far", sinceBase, 1, 2},
			{4194311, "g", "far", sinceBase, -1, 1},
			{self, "d", host, sinceBase, -1, 1},
		}, queue: []qwant{{4194364, 1, 10, 5000}, {4194312, 2, 0, 0}, {4194313, 2, 0, 0}, {4194344, 3, 0, 0}, {4194354, 4, 0, 0}, {self, 5, 0, 0}, {4194311, 3, 0, 0}, {4194311, 6, 0, 0}, {self, 7, -10, 0}}},
		// A wait among several slots restricted to some ("slots") is ahead
		// only of those that would take one of them.
		{name: "slots restrict a wait among several", files: []file{
			{name: entryName(4194305, 1), data: rec{pid: "4194305", host: "far", gpus: "4", more: `,"slots":[2,3]`}.json()},
			{name: entryName(4194306, 2), data: rec{pid: "4194306", host: "far", gpu: "0", gpus: "4", more: ``}.json()},
			{name: entryName(4194307, 3), data: rec{pid: "4194307", host: "far", gpu: "3", gpus: "4", more: ``}.json()},
			{name: entryName(4194308, 4), data: rec{pid: "4194308", host: "far", gpus: "4", more: `,"slots":[0,"1",1.0,1024,-1]`}.json()},
			{name: entryName(4194309, 5), data: rec{pid: "4194309", host: "far", gpus: "4", more: `,"slots":[]`}.json()},
			{name: entryName(4194310, 6), data: rec{pid: "4194310", host: "far", gpu: "1", gpus: "4", more: `,"slots":[1,2]`}.json()},
			{name: entryName(4194311, 7), data: rec{pid: "4194311", host: "far", gpus: "4", more: `,"slots":[9]`}.json()},
			{name: entryName(4194312, 8), data: rec{pid: "4194312", host: "far", gpus: "2", more: `,"slots":null`}.json()},
		}, want: []want{
			{4194305, "", "far", 0, -1, 4}, {4194306, "", "far", 0, 0, 4}, {4194307, "", "far", 0, 3, 4}, {4194308, "", "far", 0, -1, 4},
			{4194309, "", "far", 0, -1, 4}, {4194310, "", "far", 0, 1, 4}, {4194311, "", "far", 0, -1, 4}, {4194312, "", "far", 0, -1, 2},
		}, queue: []qwant{{4194305, 1, 0, 0}, {4194306, 1, 0, 0}, {4194307, 2, 0, 0}, {4194308, 2, 0, 0}, {4194309, 5, 0, 0}, {4194310, 2, 0, 0}, {4194311, 1, 0, 0}, {4194312, 5, 0, 0}}},

		// File types: only regular files are read, never through a link.
		{name: "symlinked entry", files: []file{{name: entryName(self, 1), link: "../../target.json"}}},
		{name: "dangling symlinked entry", files: []file{{name: entryName(self, 1), link: "../../missing.json"}}},
		{name: "directory named as an entry", files: []file{{name: entryName(self, 1), dir: true}}},
		{name: "FIFO named as an entry", files: []file{{name: entryName(self, 1), fifo: true}}},
	}
	kept := cases[:0]
	for _, c := range cases {
		if c.needRoot && os.Geteuid() != 0 {
			continue
		}
		kept = append(kept, c)
	}
	return kept, liveJSON
}

// setUpCase writes the case's registry in a new temporary directory and
// returns the lock path.
func setUpCase(t *testing.T, tc waiterCase, liveJSON string) string {
	t.Helper()
	tmp := t.TempDir()
	// A live entry and a directory holding one outside the registry, for
	// the symlink rows: write-locked, so that only the link hides them.
	target := filepath.Join(tmp, "target.json")
	real := filepath.Join(tmp, "real-dir", entryName(os.Getpid(), 1))
	for _, p := range []string{target, real} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(liveJSON), 0o644); err != nil {
			t.Fatal(err)
		}
		lockEntry(t, p, false)
	}
	if !tc.noDir {
		writeRegistry(t, filepath.Join(tmp, regDirName), tc.files)
	}
	return filepath.Join(tmp, regLockName)
}

func TestWaiters(t *testing.T) {
	cases, liveJSON := waiterCases(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := listWithin(t, setUpCase(t, tc, liveJSON))
			checkWaiters(t, got, tc.want)
			if tc.queue != nil && fmt.Sprint(gotQueue(got)) != fmt.Sprint(tc.queue) {
				t.Fatalf("queue %v\nwant  %v", gotQueue(got), tc.queue)
			}
		})
	}
}

// TestWaitersMatchesOffloadLock reads every table registry with both Waiters
// and `offload-lock --json status`, which must list the same waiters in the
// same order.
func TestWaitersMatchesOffloadLock(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	cases, liveJSON := waiterCases(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lockPath := setUpCase(t, tc, liveJSON)
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, "--lock", lockPath, "--json", "status")
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			// Exit status 1 means free, the usual case here.
			if err := cmd.Run(); err != nil {
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
					t.Fatalf("status: %v; stderr: %s", err, stderr.String())
				}
			}
			var board struct {
				Waiters []struct {
					PID      int    `json:"pid"`
					Label    string `json:"label"`
					Host     string `json:"host"`
					Since    int64  `json:"since"`
					GPU      *int   `json:"gpu"`
					GPUs     int    `json:"gpus"`
					Position *int   `json:"position"`
					Priority int    `json:"priority"`
					ExpectMs *int64 `json:"expectMs"`
				} `json:"waiters"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &board); err != nil {
				t.Fatalf("status output %q: %v", stdout.String(), err)
			}
			var theirs []want
			var theirQueue []qwant
			for _, w := range board.Waiters {
				gpu := -1
				if w.GPU != nil {
					gpu = *w.GPU
				}
				theirs = append(theirs, want{w.PID, w.Label, w.Host, w.Since, gpu, w.GPUs})
				q := qwant{pid: w.PID, priority: w.Priority}
				if w.Position != nil {
					q.position = *w.Position
				}
				if w.ExpectMs != nil {
					q.expectMs = *w.ExpectMs
				}
				theirQueue = append(theirQueue, q)
			}
			got := listWithin(t, lockPath)
			if ours := gotWants(got); fmt.Sprint(ours) != fmt.Sprint(theirs) {
				t.Fatalf("Waiters %v\noffload-lock %v", ours, theirs)
			}
			if ours := gotQueue(got); fmt.Sprint(ours) != fmt.Sprint(theirQueue) {
				t.Fatalf("Waiters' queue %v\noffload-lock's %v", ours, theirQueue)
			}
		})
	}
}

// listWithin runs Waiters under a watchdog, so that a FIFO that blocked it
// fails the test instead of hanging it.
func listWithin(t *testing.T, lockPath string) []Waiter {
	t.Helper()
	done := make(chan []Waiter, 1)
	go func() { done <- Waiters(lockPath) }()
	select {
	case ws := <-done:
		return ws
	case <-time.After(10 * time.Second):
		t.Fatalf("Waiters(%q) did not return within 10s", lockPath)
		return nil
	}
}

func checkWaiters(t *testing.T, got []Waiter, wantList []want) {
	t.Helper()
	if len(wantList) == 0 {
		if got != nil {
			t.Fatalf("got %v (%d waiters), want nil", gotWants(got), len(got))
		}
		return
	}
	g := gotWants(got)
	if fmt.Sprint(g) != fmt.Sprint(wantList) {
		t.Fatalf("got  %v\nwant %v", g, wantList)
	}
	now := time.Now()
	for _, w := range got {
		max := now.Sub(w.Since)
		if max < 0 {
			max = 0
		}
		if w.Waited < 0 || w.Waited > max {
			t.Errorf("pid %d: Waited %v, want in [0, %v]", w.PID, w.Waited, max)
		}
	}
}

// TestWaitersOrder checks the serving order on many ties of priority,
// written in shuffled order under shuffled names, so that neither the
// directory's order, the names nor since can pass for arrival.
func TestWaitersOrder(t *testing.T) {
	tmp := t.TempDir()
	type key struct {
		priority int
		pid      int
	}
	var keys []key
	for _, p := range []int{10, 0, -3} {
		for pid := farPID + 100; pid < farPID+110; pid++ {
			keys = append(keys, key{p, pid})
		}
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var files []file
	arrived := map[int][]int{} // by priority: pids in the order written
	for n, i := range rng.Perm(len(keys)) {
		k := keys[i]
		arrived[k.priority] = append(arrived[k.priority], k.pid)
		files = append(files, file{
			// Name and since both run against the order written.
			name: entryName(k.pid, 1000-n),
			data: rec{pid: strconv.Itoa(k.pid), host: "far", since: sinceBase - int64(n),
				more: fmt.Sprintf(`,"priority":%d`, k.priority)}.json(),
		})
	}
	var wantList []qwant
	for _, p := range []int{10, 0, -3} {
		for _, pid := range arrived[p] {
			wantList = append(wantList, qwant{pid, len(wantList) + 1, p, 0})
		}
	}
	writeRegistry(t, filepath.Join(tmp, regDirName), files)
	lockPath := filepath.Join(tmp, regLockName)
	if got := gotQueue(Waiters(lockPath)); fmt.Sprint(got) != fmt.Sprint(wantList) {
		t.Fatalf("got  %v\nwant %v", got, wantList)
	}
	if bin := offloadLockBin(t); bin != "" {
		if theirs := cliQueue(t, bin, lockPath); fmt.Sprint(theirs) != fmt.Sprint(wantList) {
			t.Fatalf("offload-lock %v\nwant         %v", theirs, wantList)
		}
	}
}

// TestServedBeforeTies checks what orders entries of the same priority and
// arrival (a coarse clock stamps files in the same tick alike): the
// author's uid, then the directory, then the name.
func TestServedBeforeTies(t *testing.T) {
	e := func(priority int, arrival int64, uid uint32, dir, name string) queuedEntry {
		return queuedEntry{rec: waiterRecord{priority: priority}, arrival: arrival, uid: uid, dir: dir, name: name}
	}
	ordered := []queuedEntry{
		e(5, 900, 9, "z", "z"),
		e(0, 100, 9, "z", "z"),
		e(0, 200, 1, "a", "a"),
		e(0, 200, 2, "a", "a"),
		e(0, 200, 2, "b", "a"),
		e(0, 200, 2, "b", "b"),
		e(-1, 0, 0, "a", "a"),
	}
	for i := range ordered {
		for j := range ordered {
			if got, want := servedBefore(&ordered[i], &ordered[j]), i < j; got != want {
				t.Errorf("servedBefore(%+v, %+v) = %t, want %t", ordered[i], ordered[j], got, want)
			}
		}
	}
}

// cliQueue is the queue `offload-lock --json status` reports for lockPath,
// as qwants.
func cliQueue(t *testing.T, bin, lockPath string) []qwant {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--lock", lockPath, "--json", "status")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Exit status 1 means free, the usual case here.
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("status: %v; stderr: %s", err, stderr.String())
		}
	}
	var board struct {
		Waiters []struct {
			PID      int    `json:"pid"`
			Position *int   `json:"position"`
			Priority int    `json:"priority"`
			ExpectMs *int64 `json:"expectMs"`
		} `json:"waiters"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &board); err != nil {
		t.Fatalf("status output %q: %v", stdout.String(), err)
	}
	ws := board.Waiters
	var out []qwant
	for _, w := range ws {
		q := qwant{pid: w.PID, priority: w.Priority}
		if w.Position != nil {
			q.position = *w.Position
		}
		if w.ExpectMs != nil {
			q.expectMs = *w.ExpectMs
		}
		out = append(out, q)
	}
	return out
}

func TestWaitersWaitedNeverNegative(t *testing.T) {
	tmp := t.TempDir()
	future := time.Now().Add(time.Hour).UnixMilli()
	writeRegistry(t, filepath.Join(tmp, regDirName), []file{
		{name: entryName(farPID+1, 1), data: rec{pid: strconv.Itoa(farPID + 1), label: "future", host: "far", since: future}.json()},
	})
	got := Waiters(filepath.Join(tmp, regLockName))
	if len(got) != 1 || got[0].Waited != 0 || got[0].Since.UnixMilli() != future {
		t.Fatalf("got %+v, want one waiter since %d with Waited 0", got, future)
	}

	recent := time.Now().Add(-time.Minute)
	tmp = t.TempDir()
	writeRegistry(t, filepath.Join(tmp, regDirName), []file{
		{name: entryName(farPID+1, 1), data: rec{pid: strconv.Itoa(farPID + 1), host: "far", since: recent.UnixMilli()}.json()},
	})
	got = Waiters(filepath.Join(tmp, regLockName))
	if len(got) != 1 || got[0].Waited < time.Minute-time.Second || got[0].Waited > time.Minute+10*time.Second {
		t.Fatalf("got %+v, want one waiter that has waited about a minute", got)
	}
}

func TestWaitersRegistryNotADirectory(t *testing.T) {
	self := os.Getpid()
	liveJSON := rec{pid: strconv.Itoa(self), label: "live"}.json()

	t.Run("symlink to a real registry", func(t *testing.T) {
		tmp := t.TempDir()
		real := filepath.Join(tmp, "real")
		writeRegistry(t, real, []file{{name: entryName(self, 1), data: liveJSON}})
		if err := os.Symlink(real, filepath.Join(tmp, regDirName)); err != nil {
			t.Fatal(err)
		}
		if got := Waiters(filepath.Join(tmp, regLockName)); got != nil {
			t.Fatalf("through a symlinked registry: got %v, want nil", gotWants(got))
		}
		// The same directory, named as the registry, is read: the link alone
		// is what hides it.
		if err := os.Remove(filepath.Join(tmp, regDirName)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(real, filepath.Join(tmp, regDirName)); err != nil {
			t.Fatal(err)
		}
		if got := Waiters(filepath.Join(tmp, regLockName)); len(got) != 1 || got[0].PID != self {
			t.Fatalf("real registry: got %v, want this process", gotWants(got))
		}
	})
	t.Run("regular file", func(t *testing.T) {
		tmp := t.TempDir()
		if err := os.WriteFile(filepath.Join(tmp, regDirName), []byte(liveJSON), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := Waiters(filepath.Join(tmp, regLockName)); got != nil {
			t.Fatalf("got %v, want nil", gotWants(got))
		}
	})
	t.Run("symlinked parent is followed", func(t *testing.T) {
		// Only the registry and what is in it must not be links; the lock's
		// parent may be reached through one, as with the lock.
		tmp := t.TempDir()
		writeRegistry(t, filepath.Join(tmp, "real", regDirName), []file{{name: entryName(self, 1), data: liveJSON}})
		if err := os.Symlink(filepath.Join(tmp, "real"), filepath.Join(tmp, "link")); err != nil {
			t.Fatal(err)
		}
		if got := Waiters(filepath.Join(tmp, "link", regLockName)); len(got) != 1 {
			t.Fatalf("got %v, want this process", gotWants(got))
		}
	})
	t.Run("unreadable user directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads any directory")
		}
		tmp := t.TempDir()
		reg := filepath.Join(tmp, regDirName)
		writeRegistry(t, reg, []file{{name: entryName(self, 1), data: liveJSON}})
		if err := os.Chmod(filepath.Join(reg, ownDir()), 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(filepath.Join(reg, ownDir()), 0o755)
		if got := Waiters(filepath.Join(tmp, regLockName)); got != nil {
			t.Fatalf("got %v, want nil", gotWants(got))
		}
	})
}

// TestWaitersBounds checks the bounded reading of a flooded registry: the
// first names of another user's directory, the first other users'
// directories by name, the first names of the registry. Each count is also
// what offload-lock reports of the same registry.
func TestWaitersBounds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to write entries of other users")
	}
	bin := offloadLockBin(t)
	agree := func(t *testing.T, lockPath string, got []Waiter) {
		t.Helper()
		if bin == "" {
			return
		}
		if theirs := cliQueue(t, bin, lockPath); fmt.Sprint(theirs) != fmt.Sprint(gotQueue(got)) {
			t.Fatalf("Waiters %v\noffload-lock %v", gotQueue(got), theirs)
		}
	}
	entry := func(in string, pid, uid int) file {
		return file{in: in, name: entryName(pid, 1), data: rec{pid: strconv.Itoa(pid), host: "far"}.json(), chown: uid}
	}
	other := "u" + strconv.Itoa(otherUID)

	t.Run("names of another user's directory", func(t *testing.T) {
		tmp := t.TempDir()
		top := filepath.Join(tmp, regDirName)
		files := []file{{in: ".", name: other, dir: true, chown: otherUID}}
		for i := 0; i < maxForeignNames+40; i++ {
			files = append(files, entry(other, farPID+i, otherUID))
		}
		writeRegistry(t, top, files)
		// Which names come first is the file system's order: read here as
		// the rule says, independently of the package.
		d, err := os.Open(filepath.Join(top, other))
		if err != nil {
			t.Fatal(err)
		}
		first, err := d.Readdirnames(maxForeignNames)
		d.Close()
		if err != nil || len(first) != maxForeignNames {
			t.Fatalf("listing: %d names, %v", len(first), err)
		}
		got := Waiters(filepath.Join(tmp, regLockName))
		if len(got) != maxForeignNames {
			t.Fatalf("%d entries of another user: got %d waiters, want %d", maxForeignNames+40, len(got), maxForeignNames)
		}
		listed := map[string]bool{}
		for _, n := range first {
			listed[n] = true
		}
		for _, w := range got {
			if !listed[entryName(w.PID, 1)] {
				t.Fatalf("pid %d listed, but its entry is not among the first %d names", w.PID, maxForeignNames)
			}
		}
		agree(t, filepath.Join(tmp, regLockName), got)
	})
	t.Run("this user's directory is read in full", func(t *testing.T) {
		tmp := t.TempDir()
		var files []file
		for i := 0; i < maxForeignNames+40; i++ {
			files = append(files, entry("", farPID+i, 0))
		}
		writeRegistry(t, filepath.Join(tmp, regDirName), files)
		got := Waiters(filepath.Join(tmp, regLockName))
		if len(got) != maxForeignNames+40 {
			t.Fatalf("got %d waiters, want all %d", len(got), maxForeignNames+40)
		}
		agree(t, filepath.Join(tmp, regLockName), got)
	})
	t.Run("other users' directories", func(t *testing.T) {
		tmp := t.TempDir()
		var files []file
		// Written in reverse, so that the order of names is not the order
		// of arrival.
		for i := maxForeignDirs + 5; i > 0; i-- {
			dir := fmt.Sprintf("u%d", 60000+i)
			files = append(files, file{in: ".", name: dir, dir: true, chown: 60000 + i}, entry(dir, farPID+i, 60000+i))
		}
		writeRegistry(t, filepath.Join(tmp, regDirName), files)
		got := Waiters(filepath.Join(tmp, regLockName))
		if len(got) != maxForeignDirs {
			t.Fatalf("%d other users: got %d waiters, want %d", maxForeignDirs+5, len(got), maxForeignDirs)
		}
		// The first 64 by name: u60001 .. u60064, which arrived last first.
		for k, w := range got {
			if want := farPID + maxForeignDirs - k; w.PID != want {
				t.Fatalf("waiter %d: pid %d, want %d", k, w.PID, want)
			}
		}
		agree(t, filepath.Join(tmp, regLockName), got)
	})
	t.Run("names of the registry", func(t *testing.T) {
		tmp := t.TempDir()
		top := filepath.Join(tmp, regDirName)
		var files []file
		for i := 0; i < maxTopNames+40; i++ {
			dir := fmt.Sprintf("d%03d", i)
			files = append(files, file{in: ".", name: dir, dir: true, chown: otherUID}, entry(dir, farPID+i, otherUID))
		}
		writeRegistry(t, top, files)
		d, err := os.Open(top)
		if err != nil {
			t.Fatal(err)
		}
		first, err := d.Readdirnames(maxTopNames)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, n := range first {
			if strings.HasPrefix(n, "d") {
				seen++
			}
		}
		want := seen
		if want > maxForeignDirs {
			want = maxForeignDirs
		}
		got := Waiters(filepath.Join(tmp, regLockName))
		if len(got) != want {
			t.Fatalf("got %d waiters, want %d (of %d directories among the first %d names)", len(got), want, seen, maxTopNames)
		}
		agree(t, filepath.Join(tmp, regLockName), got)
	})
}

func TestQueueDir(t *testing.T) {
	tests := []struct {
		lock, parent, name string
	}{
		{"/tmp/local-offload-gpu.lock", "/tmp", ".local-offload-gpu.lock.queue"},
		{"/tmp/local-offload-gpu.lock/", "/tmp", ".local-offload-gpu.lock.queue"},
		{"/tmp/local-offload-gpu.lock//", "/tmp", ".local-offload-gpu.lock.queue"},
		{"/gpu.lock", "/", ".gpu.lock.queue"},
		{"gpu.lock", ".", ".gpu.lock.queue"},
		{"a/b/gpu.lock", "a/b", ".gpu.lock.queue"},
		{"", "", ""},
		{"/", "", ""},
		{"//", "", ""},
	}
	for _, tc := range tests {
		parent, name, ok := queueDir(tc.lock)
		if parent != tc.parent || name != tc.name || ok != (tc.name != "") {
			t.Errorf("queueDir(%q) = %q, %q, %t; want %q, %q", tc.lock, parent, name, ok, tc.parent, tc.name)
		}
	}
	if got := Waiters(""); got != nil {
		t.Errorf(`Waiters("") = %v, want nil`, got)
	}
}

func TestWaitersRelativeLockPath(t *testing.T) {
	tmp := t.TempDir()
	writeRegistry(t, filepath.Join(tmp, regDirName), []file{
		{name: entryName(farPID+1, 1), data: rec{pid: strconv.Itoa(farPID + 1), label: "rel", host: "far"}.json()},
	})
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(tmp); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	if got := Waiters(regLockName); len(got) != 1 || got[0].Label != "rel" {
		t.Fatalf("got %v, want the entry of ./%s", gotWants(got), regDirName)
	}
}

// snapshot lists every path under root with its mode, size, mtime and
// contents.
func snapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), ctimeNs(t, p))
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", data)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestWaitersDoesNotModify(t *testing.T) {
	tmp := t.TempDir()
	self := os.Getpid()
	writeRegistry(t, filepath.Join(tmp, regDirName), []file{
		{name: entryName(self, 1), data: rec{pid: strconv.Itoa(self)}.json(), unlocked: true},
		{name: entryName(self, 2), data: rec{pid: strconv.Itoa(self)}.json()},
		{name: strings.TrimSuffix(entryName(self, 2), ".json") + ".wake", fifo: true},
		{name: ".1-000000000000.tmp", data: "{"},
		{name: "junk", data: "x"},
		{in: ".", name: "junk", data: "x"},
	})
	before := snapshot(t, tmp)
	if got := Waiters(filepath.Join(tmp, regLockName)); len(got) != 1 {
		t.Fatalf("got %v, want only the locked entry", gotWants(got))
	}
	if after := snapshot(t, tmp); after != before {
		t.Fatalf("Waiters changed the tree:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// With no registry, none is created.
	empty := t.TempDir()
	Waiters(filepath.Join(empty, regLockName))
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("Waiters created %v", names)
	}
}

// offloadLockBin is the offload-lock CLI: $OFFLOAD_LOCK_BIN, else the build
// tree's. "" when missing.
func offloadLockBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("OFFLOAD_LOCK_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "..", "build", "offload-lock")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return ""
	}
	if st, err := os.Stat(abs); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return abs
}

// TestWaitersOffloadLock checks Waiters against the registry a real
// offload-lock waiter keeps: a holder holds the lock, a second process waits
// for it, shows up in Waiters, and is gone once it got the lock and ended.
func TestWaitersOffloadLock(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	tmp := t.TempDir()
	lockPath := filepath.Join(tmp, regLockName)
	deadline := time.Now().Add(30 * time.Second)

	// The holder holds until its stdin is closed.
	holder := exec.Command(bin, "--lock", lockPath, "hold", "--label", "holder")
	holdIn, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	holdOut, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var holdErr bytes.Buffer
	holder.Stderr = &holdErr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	holderDone := make(chan error, 1)
	t.Cleanup(func() {
		holdIn.Close()
		select {
		case <-holderDone:
		case <-time.After(5 * time.Second):
			_ = holder.Process.Kill()
			<-holderDone
		}
	})
	acquired := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(holdOut)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "acquired ") {
				acquired <- sc.Text()
			}
		}
		_, _ = io.Copy(io.Discard, holdOut)
		holderDone <- holder.Wait()
	}()
	select {
	case <-acquired:
	case err := <-holderDone:
		holderDone <- err
		t.Fatalf("holder exited before acquiring: %v; stderr: %s", err, holdErr.String())
	case <-time.After(time.Until(deadline)):
		t.Fatalf("holder did not acquire; stderr: %s", holdErr.String())
	}
	if got := Waiters(lockPath); got != nil {
		t.Fatalf("before anyone waits: got %v, want nil", gotWants(got))
	}

	// The waiter registers after it has waited 100 ms.
	var runErr bytes.Buffer
	run := exec.Command(bin, "--lock", lockPath, "run", "--label", "go-visible", "--", "true")
	run.Stderr = &runErr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- run.Wait() }()
	t.Cleanup(func() {
		select {
		case <-runDone:
		default:
			_ = run.Process.Kill()
			<-runDone
		}
	})

	var got []Waiter
	for {
		got = Waiters(lockPath)
		if len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiting run never showed up; its stderr: %s", runErr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	w := got[0]
	if len(got) != 1 || w.PID != run.Process.Pid || w.Label != "go-visible" || w.GPU != -1 || w.GPUs != 1 {
		t.Fatalf("got %+v, want one waiter: pid %d label go-visible gpu -1 gpus 1", got, run.Process.Pid)
	}
	if host, _ := os.Hostname(); w.Host != host {
		t.Errorf("Host %q, want %q", w.Host, host)
	}
	if w.Waited < 0 || time.Since(w.Since) < 0 || time.Since(w.Since) > time.Minute {
		t.Errorf("Since %v Waited %v: not a wait that began just now", w.Since, w.Waited)
	}

	// Released: the run gets the lock, runs true, and leaves the registry.
	holdIn.Close()
	select {
	case err := <-runDone:
		runDone <- err
		if err != nil {
			t.Fatalf("run: %v; stderr: %s", err, runErr.String())
		}
	case <-time.After(time.Until(deadline)):
		t.Fatalf("run did not finish after the release; stderr: %s", runErr.String())
	}
	for {
		got = Waiters(lockPath)
		if got == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the release: still %v", gotWants(got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
