package gpulock

// Tests of the two test seams, pidAlive and inspectAt, which the original
// reader's own test file uses (issue 14, item 8): that file must compile and
// pass in this package unchanged, so the seams keep its names and signatures,
// and this package's tests leave its top-level names free.

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// The seams' exact types: the original reader's tests assign a
// func(int) bool to pidAlive and call inspectAt(string, time.Duration,
// time.Time) for an Info.
var (
	_ func(int) bool                              = pidAlive
	_ func(string, time.Duration, time.Time) Info = inspectAt
)

// stubPidAlive replaces pidAlive for the rest of the test.
func stubPidAlive(t *testing.T, f func(int) bool) {
	t.Helper()
	orig := pidAlive
	pidAlive = f
	t.Cleanup(func() { pidAlive = orig })
}

// heldBy creates a lock recording pid, in its own temporary directory.
func heldBy(t *testing.T, pid int) string {
	t.Helper()
	return makeLock(t, filepath.Join(t.TempDir(), DefaultLockName),
		[]byte(fmt.Sprintf(`{"pid":%d,"startedAt":%d}`, pid, started)))
}

func TestPidAliveDefaultProbe(t *testing.T) {
	cases := []struct {
		name string
		pid  int
		want bool
	}{
		{"this process", os.Getpid(), true},
		{"init (alive, EPERM when not root)", 1, true},
		{"an exited, reaped child", deadPID(t), false},
		{"zero is never signalled", 0, false},
		{"negative is never signalled", -1, false},
	}
	for _, tc := range cases {
		if got := pidAlive(tc.pid); got != tc.want {
			t.Errorf("%s: pidAlive(%d) = %v, want %v", tc.name, tc.pid, got, tc.want)
		}
	}
}

// Inspect judges liveness through pidAlive alone: a stub overrides the real
// state of the process in both directions, and is asked about the recorded
// pid exactly once per inspection.
func TestInspectLivenessGoesThroughPidAlive(t *testing.T) {
	self, dead := os.Getpid(), deadPID(t)

	var asked []int
	stubPidAlive(t, func(pid int) bool { asked = append(asked, pid); return false })
	if got := Inspect(heldBy(t, self)); got != (Info{}) {
		t.Errorf("live holder, stub says dead: got %+v, want free", got)
	}
	if len(asked) != 1 || asked[0] != self {
		t.Errorf("pidAlive asked about %v, want [%d]", asked, self)
	}

	asked = nil
	stubPidAlive(t, func(pid int) bool { asked = append(asked, pid); return true })
	got := InspectTTL(heldBy(t, dead), DefaultTTL)
	if !got.Held || got.PID != dead {
		t.Errorf("dead holder, stub says alive: got %+v, want held by %d", got, dead)
	}
	if len(asked) != 1 || asked[0] != dead {
		t.Errorf("pidAlive asked about %v, want [%d]", asked, dead)
	}
}

// A recorded pid <= 0, or none at all, is never checked: the lock reads as
// held within the TTL, as in the original reader.
func TestInspectDoesNotAskAboutNonPositivePids(t *testing.T) {
	stubPidAlive(t, func(pid int) bool {
		t.Errorf("pidAlive(%d) called", pid)
		return false
	})
	for _, meta := range []string{`{"pid":0,"startedAt":1}`, `{"pid":-7,"startedAt":1}`, `{"startedAt":1}`, `null`} {
		lock := makeLock(t, filepath.Join(t.TempDir(), DefaultLockName), []byte(meta))
		got := Inspect(lock)
		if !got.Held {
			t.Errorf("meta %s: got %+v, want held", meta, got)
		}
	}
}

// inspectAt judges the TTL at the clock it is given, so Age is exact.
func TestInspectAtFixedClock(t *testing.T) {
	self := os.Getpid()
	lock := heldBy(t, self)
	mtime := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	setMetaMtime(t, lock, mtime)

	cases := []struct {
		name string
		ttl  time.Duration
		now  time.Time
		held bool
		age  time.Duration
	}{
		{"half the TTL", time.Hour, mtime.Add(30 * time.Minute), true, 30 * time.Minute},
		{"exactly the TTL is not stale", time.Hour, mtime.Add(time.Hour), true, time.Hour},
		{"one nanosecond past the TTL", time.Hour, mtime.Add(time.Hour + time.Nanosecond), false, 0},
		{"two hours on, one-hour TTL", time.Hour, mtime.Add(2 * time.Hour), false, 0},
		{"two hours on, three-hour TTL", 3 * time.Hour, mtime.Add(2 * time.Hour), true, 2 * time.Hour},
		{"mtime in the future: negative Age, held", time.Hour, mtime.Add(-2 * time.Second), true, -2 * time.Second},
	}
	for _, tc := range cases {
		got := inspectAt(lock, tc.ttl, tc.now)
		want := Info{}
		if tc.held {
			want = Info{Held: true, Age: tc.age, PID: self, StartedAt: time.UnixMilli(started)}
		}
		if !infoEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, want)
		}
	}
}

// Inspect and InspectTTL are inspectAt at the current time: the Age they
// report lies between the clock read just before and just after the call.
func TestInspectIsInspectAtNow(t *testing.T) {
	lock := heldBy(t, os.Getpid())
	mtime := time.Now().Add(-61 * time.Minute).Truncate(time.Second)
	setMetaMtime(t, lock, mtime)

	if got := Inspect(lock); got != (Info{}) {
		t.Errorf("Inspect, 61 minutes old: got %+v, want free", got)
	}
	before := time.Now()
	got := InspectTTL(lock, 2*time.Hour)
	after := time.Now()
	if !got.Held {
		t.Fatalf("InspectTTL(2h), 61 minutes old: got %+v, want held", got)
	}
	if lo, hi := before.Sub(mtime), after.Sub(mtime); got.Age < lo || got.Age > hi {
		t.Errorf("Age = %v, want within [%v, %v]", got.Age, lo, hi)
	}
	if at := inspectAt(lock, DefaultTTL, mtime.Add(time.Minute)); !at.Held || at.Age != time.Minute {
		t.Errorf("inspectAt one minute after the mtime: got %+v, want held for 1m0s", at)
	}
}

// WaitFree inspects through the same seam: a holder that the stub reports
// dead from its third check on ends the wait at that inspection.
func TestWaitFreeSeesStubbedExit(t *testing.T) {
	lock := heldBy(t, os.Getpid())
	var checks int32
	stubPidAlive(t, func(int) bool { return atomic.AddInt32(&checks, 1) < 3 })

	got, _ := within(t, func() Info {
		return WaitFree(context.Background(), lock, 10*time.Second, time.Millisecond)
	})
	if got != (Info{}) {
		t.Errorf("got %+v, want free", got)
	}
	if n := atomic.LoadInt32(&checks); n != 3 {
		t.Errorf("pidAlive called %d times, want 3", n)
	}
}

// upstreamNames are the top-level names the original reader's test file
// declares. A drop-in must leave them free, or that file no longer compiles
// beside this package's tests. The file itself, dropped in as
// gpulock_test.go, is not checked.
var upstreamNames = []string{
	"writeLock",
	"TestPathResolution",
	"TestInspectAbsent",
	"TestInspectHeldByLiveHolder",
	"TestInspectDeadHolderIsStale",
	"TestInspectMissingMetaIsStale",
	"TestInspectTTLCap",
	"TestPidAliveSelf",
	"TestWaitFreeBoundedWait",
	"TestWaitFreeReleasedMidWait",
}

func TestUpstreamTestNamesAreFree(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("listing test files: %v %v", files, err)
	}
	taken := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if name == "gpulock_test.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", name, err)
		}
		for ident := range topLevelNames(f) {
			taken[ident] = name
		}
	}
	for _, n := range upstreamNames {
		if file, ok := taken[n]; ok {
			t.Errorf("%s declares %s, which the original reader's test file declares too", file, n)
		}
	}
}

// topLevelNames are the package-level identifiers a file declares (methods
// excluded: they live in their type's scope).
func topLevelNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				}
			}
		}
	}
	return names
}
