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

// The waiter registry is written by hand in each test's t.TempDir(): the lock
// is <tmp>/gpu.lock, its registry <tmp>/.gpu.lock.waiters.

const (
	// farPID+n is the pid of an entry from another host: above any pid
	// this kernel can hand out (PID_MAX_LIMIT), so that no local process,
	// of whatever owner, is named by it.
	farPID = 4194304

	regLockName = "gpu.lock"
	regDirName  = ".gpu.lock.waiters"
	sinceBase   = int64(1764470000000)
)

// entryName is a well-formed registry entry name for pid; n makes it unique.
func entryName(pid, n int) string {
	return fmt.Sprintf("%d-%012x.json", pid, n)
}

// selfStartTicks reads this process's start time (field 22 of
// /proc/self/stat), parsed here independently of the package.
func selfStartTicks(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc/self/stat: %v", err)
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil || ticks == 0 {
		t.Fatalf("starttime %q: %v", fields[19], err)
	}
	return ticks
}

// thisBootID is the current boot id, or "" when it cannot be read.
func thisBootID() string {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
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
	boot  string
	ticks uint64
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
	return fmt.Sprintf(`{"pid":%s,"label":%q,"host":%q,"since":%d,"gpu":%s,"gpus":%s,"bootId":%q,"procTicks":%d%s}`,
		r.pid, r.label, r.host, r.since, gpu, gpus, r.boot, r.ticks, r.more) + "\n"
}

// file is one directory entry of a registry to create.
type file struct {
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
	// chown, when not 0, gives the file to that uid (as root only).
	chown int
}

// writeRegistry creates the registry directory under tmp with the files.
func writeRegistry(t *testing.T, regDir string, files []file) {
	t.Helper()
	if err := os.MkdirAll(regDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p := filepath.Join(regDir, f.name)
		var err error
		switch {
		case f.link != "":
			err = os.Symlink(f.link, p)
		case f.fifo:
			err = syscall.Mkfifo(p, 0o600)
		case f.dir:
			err = os.Mkdir(p, 0o700)
		default:
			err = os.WriteFile(p, []byte(f.data), 0o600)
			if err == nil && f.chown != 0 {
				err = os.Lchown(p, f.chown, f.chown)
			}
			if err == nil && !f.unlocked {
				lockEntry(t, p, f.readLocked)
			}
		}
		if err != nil {
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
	// needBoot: the row depends on reading this boot's id; needNS on
	// reading this process's pid namespace; needRoot on giving files away.
	needBoot, needNS, needRoot bool
	want                       []want
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
	ticks := selfStartTicks(t)
	host := thisHost(t)
	boot := thisBootID()
	dead := deadPID(t)
	zombie := zombiePID(t)
	ns := currentPidNamespace()

	// live is an entry of this test process, as offload-lock would write it
	// for itself.
	live := rec{pid: selfS, label: "live", host: host, since: sinceBase, boot: boot, ticks: ticks}
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
		{name: "live entry without procTicks", files: one(with(live, func(r *rec) { r.ticks = 0 })), want: []want{liveWant}},
		{name: "live entry without host or bootId", files: one(with(live, func(r *rec) { r.host, r.boot = "", "" })),
			want: []want{{self, "live", "", sinceBase, -1, 1}}},
		{name: "minimal object", files: raw(`{"pid":` + selfS + `}`), want: []want{{self, "", "", 0, -1, 1}}},
		{name: "dead pid", files: []file{{name: entryName(dead, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead); r.ticks = 0 }).json()}}},
		{name: "dead pid without host", files: []file{{name: entryName(dead, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead); r.host, r.ticks = "", 0 }).json()}}},
		{name: "zombie pid", files: []file{{name: entryName(zombie, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(zombie); r.ticks = 0 }).json()}}},
		{name: "pid reused (other procTicks)", files: one(with(live, func(r *rec) { r.ticks = ticks + 1 }))},
		{name: "other boot", needBoot: true, files: one(with(live, func(r *rec) { r.boot = "00000000-0000-0000-0000-000000000000" }))},
		{name: "other host kept even with a dead pid and other boot",
			files: []file{{name: entryName(dead, 1), data: rec{pid: strconv.Itoa(dead), label: "far", host: host + "-elsewhere", since: sinceBase, boot: "x", ticks: 1}.json()}},
			want:  []want{{dead, "far", host + "-elsewhere", sinceBase, -1, 1}}},

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
		{name: "pid in the name with a leading zero", files: []file{{name: "0" + entryName(self, 1), data: liveJSON}}},

		// The write lock is the proof of life.
		{name: "entry not write-locked", files: []file{{name: entryName(self, 1), data: liveJSON, unlocked: true}}},
		{name: "entry only read-locked", files: []file{{name: entryName(self, 1), data: liveJSON, readLocked: true}}},
		{name: "other host, not write-locked", files: []file{{name: entryName(dead, 1), unlocked: true,
			data: rec{pid: strconv.Itoa(dead), label: "far", host: host + "-elsewhere", since: sinceBase}.json()}}},
		{name: "locked entry beside an unlocked one", files: []file{
			{name: entryName(self, 1), data: with(live, func(r *rec) { r.label = "gone"; r.more = `,"priority":50` }).json(), unlocked: true},
			{name: entryName(self, 2), data: liveJSON},
		}, want: []want{liveWant}, queue: []qwant{{self, 1, 0, 0}}},

		// Only the process's own user (or root) writes its entry: a file of
		// another user naming a process here is a forgery, however locked.
		{name: "another user's entry for this process", needRoot: true,
			files: []file{{name: entryName(self, 1), data: liveJSON, chown: 65534}}},
		{name: "another user's entry for a pid that is not here", needRoot: true,
			files: []file{{name: entryName(farPID, 1), data: rec{pid: strconv.Itoa(farPID), label: "far", host: "far"}.json(), chown: 65534}},
			want:  []want{{farPID, "far", "far", 0, -1, 1}}},
		{name: "another user's entry from another pid namespace", needRoot: true, needNS: true,
			files: []file{{name: entryName(self, 1), data: with(live, func(r *rec) { r.more = fmt.Sprintf(`,"pidNs":%d`, ns+1) }).json(), chown: 65534}},
			want:  []want{liveWant}},

		// Another pid namespace: its pid means nothing here, the lock decides.
		{name: "other pid namespace, dead pid here", needNS: true,
			files: []file{{name: entryName(dead, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead); r.ticks = 0; r.more = fmt.Sprintf(`,"pidNs":%d`, ns+1) }).json()}},
			want:  []want{{dead, "live", host, sinceBase, -1, 1}}},
		{name: "this pid namespace, dead pid", needNS: true,
			files: []file{{name: entryName(dead, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead); r.ticks = 0; r.more = fmt.Sprintf(`,"pidNs":%d`, ns) }).json()}}},
		{name: "pidNs 0 is unknown", files: []file{{name: entryName(dead, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead); r.ticks = 0; r.more = `,"pidNs":0` }).json()}}},
		{name: "pidNs negative is ignored", files: []file{{name: entryName(dead, 1), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead); r.ticks = 0; r.more = `,"pidNs":-7` }).json()}}},

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
		{name: "procTicks negative is ignored", files: raw(`{"pid":` + selfS + `,"procTicks":-1}`), want: []want{{self, "", "", 0, -1, 1}}},
		{name: "procTicks float is ignored", files: raw(`{"pid":` + selfS + `,"procTicks":1.5}`), want: []want{{self, "", "", 0, -1, 1}}},
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
		{name: "priority clamped low", files: one(with(live, func(r *rec) { r.more = `,"priority":-101` })), queue: []qwant{{self, 1, -100, 0}}, want: []want{liveWant}},
		{name: "priority 2^64-1 wraps", files: one(with(live, func(r *rec) { r.more = `,"priority":18446744073709551615` })), queue: []qwant{{self, 1, -1, 0}}, want: []want{liveWant}},
		{name: "priority not an integer", files: one(with(live, func(r *rec) { r.more = `,"priority":1.5,"expectMs":"60000"` })), queue: []qwant{{self, 1, 0, 0}}, want: []want{liveWant}},
		{name: "priority integral float ignored", files: one(with(live, func(r *rec) { r.more = `,"priority":5.0,"expectMs":6e4` })), queue: []qwant{{self, 1, 0, 0}}, want: []want{liveWant}},
		{name: "expectMs 0, negative, null", files: []file{
			{name: entryName(self, 1), data: with(live, func(r *rec) { r.more = `,"expectMs":0,"queuedUs":1` }).json()},
			{name: entryName(self, 2), data: with(live, func(r *rec) { r.more = `,"expectMs":-5,"queuedUs":2` }).json()},
			{name: entryName(self, 3), data: with(live, func(r *rec) { r.more = `,"expectMs":null,"queuedUs":3` }).json()},
		}, want: []want{liveWant, liveWant, liveWant}, queue: []qwant{{self, 1, 0, 0}, {self, 2, 0, 0}, {self, 3, 0, 0}}},

		// Serving order: priority, then queuedUs, then pid, then name; since
		// does not count. Positions per slot; a wait among slots has none.
		{name: "served by priority, then arrival, then pid, then name", files: []file{
			{name: entryName(self, 1), data: with(live, func(r *rec) { r.label = "c"; r.since = 1; r.more = `,"queuedUs":300` }).json()},
			{name: entryName(4194354, 2), data: rec{pid: "4194354", label: "b", host: "far", since: sinceBase + 100, more: `,"queuedUs":100`}.json()},
			{name: entryName(self, 3), data: with(live, func(r *rec) { r.label = "d"; r.more = `,"queuedUs":200,"priority":-10` }).json()},
			{name: entryName(4194344, 4), data: rec{pid: "4194344", label: "a", host: "far", since: sinceBase + 900, more: `,"queuedUs":100`}.json()},
			{name: entryName(dead, 5), data: with(live, func(r *rec) { r.pid = strconv.Itoa(dead); r.ticks = 0; r.more = `,"priority":99` }).json()},
			{name: entryName(4194364, 6), data: rec{pid: "4194364", label: "e", host: "far", since: sinceBase, more: `,"queuedUs":1000,"priority":10,"expectMs":5000`}.json()},
			{name: entryName(4194311, 7), data: rec{pid: "4194311", label: "f", host: "far", since: sinceBase, gpu: "1", gpus: "2", more: `,"queuedUs":1000`}.json()},
			{name: entryName(4194311, 8), data: rec{pid: "4194311", label: "g", host: "far", since: sinceBase, more: `,"queuedUs":1000`}.json()},
			{name: entryName(4194312, 9), data: rec{pid: "4194312", label: "h", host: "far", since: sinceBase, gpus: "2", more: `,"queuedUs":5`}.json()},
			{name: entryName(4194313, 10), data: rec{pid: "4194313", label: "i", host: "far", since: sinceBase, gpu: "1", gpus: "2", more: `,"queuedUs":7`}.json()},
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
			{name: entryName(4194305, 1), data: rec{pid: "4194305", host: "far", gpus: "4", more: `,"queuedUs":1,"slots":[2,3]`}.json()},
			{name: entryName(4194306, 2), data: rec{pid: "4194306", host: "far", gpu: "0", gpus: "4", more: `,"queuedUs":2`}.json()},
			{name: entryName(4194307, 3), data: rec{pid: "4194307", host: "far", gpu: "3", gpus: "4", more: `,"queuedUs":3`}.json()},
			{name: entryName(4194308, 4), data: rec{pid: "4194308", host: "far", gpus: "4", more: `,"queuedUs":4,"slots":[0,"1",1.0,1024,-1]`}.json()},
			{name: entryName(4194309, 5), data: rec{pid: "4194309", host: "far", gpus: "4", more: `,"queuedUs":5,"slots":[]`}.json()},
			{name: entryName(4194310, 6), data: rec{pid: "4194310", host: "far", gpu: "1", gpus: "4", more: `,"queuedUs":6,"slots":[1,2]`}.json()},
			{name: entryName(4194311, 7), data: rec{pid: "4194311", host: "far", gpus: "4", more: `,"queuedUs":7,"slots":[9]`}.json()},
			{name: entryName(4194312, 8), data: rec{pid: "4194312", host: "far", gpus: "2", more: `,"queuedUs":8,"slots":null`}.json()},
		}, want: []want{
			{4194305, "", "far", 0, -1, 4}, {4194306, "", "far", 0, 0, 4}, {4194307, "", "far", 0, 3, 4}, {4194308, "", "far", 0, -1, 4},
			{4194309, "", "far", 0, -1, 4}, {4194310, "", "far", 0, 1, 4}, {4194311, "", "far", 0, -1, 4}, {4194312, "", "far", 0, -1, 2},
		}, queue: []qwant{{4194305, 1, 0, 0}, {4194306, 1, 0, 0}, {4194307, 2, 0, 0}, {4194308, 2, 0, 0}, {4194309, 5, 0, 0}, {4194310, 2, 0, 0}, {4194311, 1, 0, 0}, {4194312, 5, 0, 0}}},

		// File types: only regular files are read, never through a link.
		{name: "symlinked entry", files: []file{{name: entryName(self, 1), link: "../target.json"}}},
		{name: "dangling symlinked entry", files: []file{{name: entryName(self, 1), link: "../missing.json"}}},
		{name: "directory named as an entry", files: []file{{name: entryName(self, 1), dir: true}}},
		{name: "FIFO named as an entry", files: []file{{name: entryName(self, 1), fifo: true}}},
	}
	kept := cases[:0]
	for _, c := range cases {
		if (c.needBoot && boot == "") || (c.needNS && ns == 0) || (c.needRoot && os.Geteuid() != 0) {
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
	// A live entry outside the registry, for the symlink rows.
	if err := os.WriteFile(filepath.Join(tmp, "target.json"), []byte(liveJSON), 0o600); err != nil {
		t.Fatal(err)
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

// TestWaitersOrder checks the serving order on many ties (priority, then
// queuedUs, then pid, then name), written in shuffled order under shuffled
// names, so that neither the directory's order nor since can pass for it.
func TestWaitersOrder(t *testing.T) {
	tmp := t.TempDir()
	type key struct {
		priority int
		queued   int64
		pid      int
		n        int // the name's hex part
	}
	var keys []key
	for _, p := range []int{10, 0, -3} {
		for q := int64(0); q < 3; q++ {
			for pid := farPID + 100; pid < farPID+104; pid++ {
				for n := 0; n < 2; n++ {
					keys = append(keys, key{p, 1000 + q, pid, n})
				}
			}
		}
	}
	// keys is in serving order already.
	var wantList []qwant
	for _, k := range keys {
		wantList = append(wantList, qwant{k.pid, len(wantList) + 1, k.priority, 0})
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var files []file
	for _, i := range rng.Perm(len(keys)) {
		k := keys[i]
		files = append(files, file{
			// Among ties the name decides, and i grows in serving order.
			name: entryName(k.pid, i),
			// since runs against the order, to show it does not count.
			data: rec{pid: strconv.Itoa(k.pid), host: "far", since: sinceBase - int64(i),
				more: fmt.Sprintf(`,"priority":%d,"queuedUs":%d`, k.priority, k.queued)}.json(),
		})
	}
	writeRegistry(t, filepath.Join(tmp, regDirName), files)
	if got := gotQueue(Waiters(filepath.Join(tmp, regLockName))); fmt.Sprint(got) != fmt.Sprint(wantList) {
		t.Fatalf("got  %v\nwant %v", got, wantList)
	}
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
		// Only the registry itself and its entries must not be links; the
		// lock's parent may be reached through one, as with the lock.
		tmp := t.TempDir()
		writeRegistry(t, filepath.Join(tmp, "real", regDirName), []file{{name: entryName(self, 1), data: liveJSON}})
		if err := os.Symlink(filepath.Join(tmp, "real"), filepath.Join(tmp, "link")); err != nil {
			t.Fatal(err)
		}
		if got := Waiters(filepath.Join(tmp, "link", regLockName)); len(got) != 1 {
			t.Fatalf("got %v, want this process", gotWants(got))
		}
	})
	t.Run("unreadable registry", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads any directory")
		}
		tmp := t.TempDir()
		reg := filepath.Join(tmp, regDirName)
		writeRegistry(t, reg, []file{{name: entryName(self, 1), data: liveJSON}})
		if err := os.Chmod(reg, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(reg, 0o700)
		if got := Waiters(filepath.Join(tmp, regLockName)); got != nil {
			t.Fatalf("got %v, want nil", gotWants(got))
		}
	})
}

func TestWaitersEntryCap(t *testing.T) {
	tmp := t.TempDir()
	reg := filepath.Join(tmp, regDirName)
	var files []file
	// Files being written and foreign names do not count towards the cap.
	for i := 0; i < 20; i++ {
		files = append(files, file{name: fmt.Sprintf(".%d-%012x.tmp", i+1, i), data: "{}"})
		files = append(files, file{name: fmt.Sprintf("other-%d", i), data: "{}"})
	}
	for i := 0; i < maxWaiterEntries; i++ {
		files = append(files, file{name: entryName(farPID+i+1, i), data: rec{pid: strconv.Itoa(farPID + i + 1), host: "far", since: sinceBase + int64(i)}.json()})
	}
	writeRegistry(t, reg, files)
	lockPath := filepath.Join(tmp, regLockName)
	got := Waiters(lockPath)
	if len(got) != maxWaiterEntries {
		t.Fatalf("%d entries: got %d waiters, want all", maxWaiterEntries, len(got))
	}
	for i := range got {
		if got[i].PID != farPID+i+1 {
			t.Fatalf("waiter %d has pid %d, want %d (oldest first)", i, got[i].PID, farPID+i+1)
		}
	}

	// Past the cap, the extra entries are not considered.
	writeRegistry(t, reg, []file{
		{name: entryName(farPID+90001, 1), data: rec{pid: strconv.Itoa(farPID + 90001), host: "far", since: 1}.json()},
		{name: entryName(farPID+90002, 2), data: rec{pid: strconv.Itoa(farPID + 90002), host: "far", since: 2}.json()},
	})
	if got := Waiters(lockPath); len(got) != maxWaiterEntries {
		t.Fatalf("%d entries: got %d waiters, want %d", maxWaiterEntries+2, len(got), maxWaiterEntries)
	}
}

func TestWaitersDir(t *testing.T) {
	tests := []struct {
		lock, dir string
	}{
		{"/tmp/local-offload-gpu.lock", "/tmp/.local-offload-gpu.lock.waiters"},
		{"/tmp/local-offload-gpu.lock/", "/tmp/.local-offload-gpu.lock.waiters"},
		{"/tmp/local-offload-gpu.lock//", "/tmp/.local-offload-gpu.lock.waiters"},
		{"/gpu.lock", "/.gpu.lock.waiters"},
		{"gpu.lock", ".gpu.lock.waiters"},
		{"a/b/gpu.lock", "a/b/.gpu.lock.waiters"},
		{"", ""},
		{"/", ""},
		{"//", ""},
	}
	for _, tc := range tests {
		dir, ok := waitersDir(tc.lock)
		if dir != tc.dir || ok != (tc.dir != "") {
			t.Errorf("waitersDir(%q) = %q, %t; want %q", tc.lock, dir, ok, tc.dir)
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
		fmt.Fprintf(&b, "%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
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
	dead := deadPID(t)
	writeRegistry(t, filepath.Join(tmp, regDirName), []file{
		{name: entryName(dead, 1), data: rec{pid: strconv.Itoa(dead)}.json()},
		{name: entryName(os.Getpid(), 2), data: rec{pid: strconv.Itoa(os.Getpid())}.json()},
		{name: ".1-000000000000.tmp", data: "{"},
		{name: "junk", data: "x"},
	})
	before := snapshot(t, tmp)
	if got := Waiters(filepath.Join(tmp, regLockName)); len(got) != 1 {
		t.Fatalf("got %v, want only this process", gotWants(got))
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
