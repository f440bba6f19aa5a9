package gpulock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What the holder declared (Priority, ExpectMs, ExpectedFree), judged at a
// fixed clock against hand-written meta.json files.
func TestInspectExpectation(t *testing.T) {
	self := os.Getpid()
	now := time.UnixMilli(started + 5*60*1000) // five minutes after startedAt
	type want struct {
		priority int
		expectMs int64
		freeIn   time.Duration // from now; -1: ExpectedFree is zero
	}
	rows := []struct {
		name string
		meta string
		want want
	}{
		{"nothing declared", `{"pid":%d,"startedAt":%d}`, want{0, 0, -1}},
		{"ten minutes declared", `{"pid":%d,"startedAt":%d,"priority":3,"expectMs":600000}`, want{3, 600000, 5 * time.Minute}},
		{"overdue is free now", `{"pid":%d,"startedAt":%d,"expectMs":60000}`, want{0, 60000, 0}},
		{"integral float and exponent", `{"pid":%d,"startedAt":%d,"priority":2.0,"expectMs":6e5}`, want{2, 600000, 5 * time.Minute}},
		{"priority clamped", `{"pid":%d,"startedAt":%d,"priority":1000}`, want{100, 0, -1}},
		{"priority clamped low", `{"pid":%d,"startedAt":%d,"priority":-1000}`, want{-100, 0, -1}},
		{"not numbers", `{"pid":%d,"startedAt":%d,"priority":"9","expectMs":"600000"}`, want{0, 0, -1}},
		{"fractions", `{"pid":%d,"startedAt":%d,"priority":1.5,"expectMs":600000.5}`, want{0, 0, -1}},
		{"zero and negative", `{"pid":%d,"startedAt":%d,"priority":0,"expectMs":-600000}`, want{0, 0, -1}},
		{"expectMs zero", `{"pid":%d,"startedAt":%d,"expectMs":0}`, want{0, 0, -1}},
		{"expectMs 2^63 does not fit", `{"pid":%d,"startedAt":%d,"expectMs":9223372036854775808}`, want{0, 0, -1}},
		{"keys are exact", `{"pid":%d,"startedAt":%d,"Priority":4,"EXPECTMS":600000}`, want{0, 0, -1}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			lock := makeLock(t, filepath.Join(t.TempDir(), DefaultLockName), []byte(fmt.Sprintf(r.meta, self, started)))
			setMetaMtime(t, lock, now.Add(-time.Second))
			info := inspectAt(lock, DefaultTTL, now)
			if !info.Held {
				t.Fatalf("not held: %+v", info)
			}
			if info.Priority != r.want.priority || info.ExpectMs != r.want.expectMs {
				t.Fatalf("Priority %d ExpectMs %d, want %d %d", info.Priority, info.ExpectMs, r.want.priority, r.want.expectMs)
			}
			switch {
			case r.want.freeIn < 0 && !info.ExpectedFree.IsZero():
				t.Fatalf("ExpectedFree %v, want zero", info.ExpectedFree)
			case r.want.freeIn >= 0 && !info.ExpectedFree.Equal(now.Add(r.want.freeIn)):
				t.Fatalf("ExpectedFree %v, want %v", info.ExpectedFree, now.Add(r.want.freeIn))
			}
		})
	}

	t.Run("without startedAt the age counts", func(t *testing.T) {
		lock := makeLock(t, filepath.Join(t.TempDir(), DefaultLockName), []byte(fmt.Sprintf(`{"pid":%d,"expectMs":600000}`, self)))
		setMetaMtime(t, lock, now.Add(-2*time.Minute))
		info := inspectAt(lock, DefaultTTL, now)
		if want := now.Add(8 * time.Minute); !info.Held || !info.ExpectedFree.Equal(want) {
			t.Fatalf("got %+v, want held, ExpectedFree %v", info, want)
		}
	})
	t.Run("free lock declares nothing", func(t *testing.T) {
		lock := makeLock(t, filepath.Join(t.TempDir(), DefaultLockName),
			[]byte(fmt.Sprintf(`{"pid":%d,"startedAt":%d,"priority":5,"expectMs":600000}`, deadPID(t), started)))
		if info := inspectAt(lock, DefaultTTL, now); info != (Info{}) {
			t.Fatalf("got %+v, want the zero Info", info)
		}
	})
}

// declaredLock is a lock held by this process that declared it would be
// held for expectMs from now (no expectMs key when 0).
func declaredLock(t *testing.T, expectMs int64) string {
	t.Helper()
	meta := fmt.Sprintf(`{"pid":%d,"startedAt":%d`, os.Getpid(), time.Now().UnixMilli())
	if expectMs != 0 {
		meta += fmt.Sprintf(`,"expectMs":%d`, expectMs)
	}
	return makeLock(t, filepath.Join(t.TempDir(), DefaultLockName), []byte(meta+"}"))
}

func TestWaitFreeWithin(t *testing.T) {
	t.Run("held for longer than the budget: at once", func(t *testing.T) {
		lock := declaredLock(t, 20*60*1000)
		info, el := within(t, func() Info { return WaitFreeWithin(context.Background(), lock, 90*time.Second, time.Hour) })
		if !info.Held || info.ExpectMs != 20*60*1000 || el > 2*time.Second {
			t.Fatalf("got %+v after %v, want held, answered at once", info, el)
		}
	})
	t.Run("undeclared: waits the budget", func(t *testing.T) {
		lock := declaredLock(t, 0)
		info, el := within(t, func() Info {
			return WaitFreeWithin(context.Background(), lock, 300*time.Millisecond, 10*time.Millisecond)
		})
		if !info.Held || el < 290*time.Millisecond {
			t.Fatalf("got %+v after %v, want held after the 300ms budget", info, el)
		}
	})
	t.Run("due within the budget: waits and sees it free", func(t *testing.T) {
		lock := declaredLock(t, 500)
		go func() {
			time.Sleep(200 * time.Millisecond)
			_ = os.RemoveAll(lock)
		}()
		info, el := within(t, func() Info { return WaitFreeWithin(context.Background(), lock, 5*time.Second, 5*time.Millisecond) })
		if info.Held || el < 150*time.Millisecond {
			t.Fatalf("got %+v after %v, want free once removed", info, el)
		}
	})
	t.Run("overdue: waits the budget", func(t *testing.T) {
		lock := declaredLock(t, 1)
		info, el := within(t, func() Info {
			return WaitFreeWithinTTL(nil, lock, DefaultTTL, 200*time.Millisecond, 10*time.Millisecond)
		})
		if !info.Held || el < 190*time.Millisecond {
			t.Fatalf("got %+v after %v, want held after the budget", info, el)
		}
	})
	t.Run("a longer holder arriving during the wait ends it", func(t *testing.T) {
		lock := declaredLock(t, 0)
		go func() {
			time.Sleep(100 * time.Millisecond)
			meta := fmt.Sprintf(`{"pid":%d,"startedAt":%d,"expectMs":3600000}`, os.Getpid(), time.Now().UnixMilli())
			// Renamed in, so that no inspection sees it half-written.
			tmp := filepath.Join(lock, ".meta.json.new")
			if os.WriteFile(tmp, []byte(meta), 0o666) == nil {
				_ = os.Rename(tmp, filepath.Join(lock, metaFileName))
			}
		}()
		info, el := within(t, func() Info { return WaitFreeWithin(context.Background(), lock, 5*time.Second, 5*time.Millisecond) })
		if !info.Held || info.ExpectMs != 3600000 || el > 2*time.Second {
			t.Fatalf("got %+v after %v, want the new holder, well before the 5s budget", info, el)
		}
	})
	t.Run("free: at once", func(t *testing.T) {
		lock := filepath.Join(t.TempDir(), DefaultLockName)
		info, el := within(t, func() Info { return WaitFreeWithin(context.Background(), lock, time.Hour, time.Hour) })
		if info != (Info{}) || el > time.Second {
			t.Fatalf("got %+v after %v", info, el)
		}
	})
}

// cliHold is an `offload-lock hold` that holds the lock (until stop).
type cliHold struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	done chan error
}

// startHold starts `offload-lock --lock lockPath hold ARGS...` and waits until
// it has printed its acquired line.
func startHold(t *testing.T, bin, lockPath string, args ...string) *cliHold {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--lock", lockPath, "hold"}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &cliHold{cmd: cmd, in: in, done: make(chan error, 1)}
	acquired := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "acquired ") {
				close(acquired)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		h.done <- cmd.Wait()
	}()
	t.Cleanup(h.stop)
	select {
	case <-acquired:
	case err := <-h.done:
		h.done <- err
		t.Fatalf("hold exited before acquiring: %v; stderr: %s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("hold did not acquire; stderr: %s", stderr.String())
	}
	return h
}

// stop releases (stdin EOF) and waits for the hold to end.
func (h *cliHold) stop() {
	h.in.Close()
	select {
	case err := <-h.done:
		h.done <- err
	case <-time.After(10 * time.Second):
		_ = h.cmd.Process.Kill()
	}
}

// TestQueueOffloadLock reads the queue of real offload-lock processes: a
// holder that declared 10 minutes at priority 3, and three `run` waiters
// queued in arrival order low, high, mid with their priorities and
// durations. Waiters must list them in serving order with their positions,
// agree with `offload-lock --json status`, leave out an unlocked copy of an
// entry, and the lock must then serve them in that order.
func TestQueueOffloadLock(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	tmp := t.TempDir()
	lockPath := filepath.Join(tmp, regLockName)
	deadline := time.Now().Add(60 * time.Second)

	holder := startHold(t, bin, lockPath, "--label", "holder", "--priority", "3", "--expect", "10m")
	info := Inspect(lockPath)
	if !info.Held || info.PID != holder.cmd.Process.Pid || info.Priority != 3 || info.ExpectMs != 600000 {
		t.Fatalf("Inspect: %+v, want held by pid %d with priority 3, expectMs 600000", info, holder.cmd.Process.Pid)
	}
	if d := time.Until(info.ExpectedFree); d < 9*time.Minute || d > 10*time.Minute {
		t.Fatalf("ExpectedFree in %v, want about 10m", d)
	}

	// The vision gate: 90 s of budget against 10 minutes to go.
	got, el := within(t, func() Info {
		return WaitFreeWithin(context.Background(), lockPath, 90*time.Second, 250*time.Millisecond)
	})
	if !got.Held || el > 2*time.Second {
		t.Fatalf("WaitFreeWithin: %+v after %v, want held, answered at once", got, el)
	}

	served := filepath.Join(tmp, "served")
	type queued struct {
		label, priority, expect string
	}
	var runs []*exec.Cmd
	var runErrs []*bytes.Buffer
	var runDone []chan struct{}
	for _, q := range []queued{{"low", "batch", "2m"}, {"high", "interactive", ""}, {"mid", "0", "30s"}} {
		args := []string{"--lock", lockPath, "run", "--label", q.label, "--priority", q.priority}
		if q.expect != "" {
			args = append(args, "--expect", q.expect)
		}
		args = append(args, "--", "sh", "-c", `echo "$0" >> "$1"`, q.label, served)
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, cmd)
		runErrs = append(runErrs, &stderr)
		done := make(chan struct{})
		runDone = append(runDone, done)
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-done
		})
		// Each waits before the next starts, so arrival order is fixed.
		for n := len(runs); len(Waiters(lockPath)) < n; {
			if time.Now().After(deadline) {
				t.Fatalf("%s never showed up in the queue; stderr: %s", q.label, stderr.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// An unlocked copy of a live waiter's entry, under a name of its pid:
	// what a process that died (or a forger) leaves behind.
	regDir := filepath.Join(tmp, regDirName, ownDir())
	names, err := os.ReadDir(regDir)
	if err != nil {
		t.Fatalf("registry %s: %v", regDir, err)
	}
	var entry string
	for _, n := range names {
		if strings.HasSuffix(n.Name(), ".json") {
			entry = n.Name()
			break
		}
	}
	if entry == "" {
		t.Fatalf("registry %s holds no entry: %v", regDir, names)
	}
	data, err := os.ReadFile(filepath.Join(regDir, entry))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.SplitN(entry, "-", 2)[0]
	forged := filepath.Join(regDir, pid+"-ffffffffffff.json")
	if err := os.WriteFile(forged, data, 0o644); err != nil {
		t.Fatal(err)
	}

	pidOf := func(i int) int { return runs[i].Process.Pid }
	want := []qwant{{pidOf(1), 1, 10, 0}, {pidOf(2), 2, 0, 30000}, {pidOf(0), 3, -10, 120000}}
	ws := Waiters(lockPath)
	if fmt.Sprint(gotQueue(ws)) != fmt.Sprint(want) {
		t.Fatalf("Waiters %v\nwant    %v", gotQueue(ws), want)
	}
	for i, label := range []string{"high", "mid", "low"} {
		if ws[i].Label != label {
			t.Errorf("waiter %d is %q, want %q", i+1, ws[i].Label, label)
		}
	}

	// offload-lock's own view of the same queue.
	out, err := exec.Command(bin, "--lock", lockPath, "--json", "status").Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var board struct {
		Priority *int   `json:"priority"`
		ExpectMs *int64 `json:"expectMs"`
		FreeInMs *int64 `json:"freeInMs"`
		Waiters  []struct {
			PID      int    `json:"pid"`
			Position *int   `json:"position"`
			Priority int    `json:"priority"`
			ExpectMs *int64 `json:"expectMs"`
		} `json:"waiters"`
	}
	if err := json.Unmarshal(out, &board); err != nil {
		t.Fatalf("status output %q: %v", out, err)
	}
	var theirs []qwant
	for _, w := range board.Waiters {
		q := qwant{pid: w.PID, priority: w.Priority}
		if w.Position != nil {
			q.position = *w.Position
		}
		if w.ExpectMs != nil {
			q.expectMs = *w.ExpectMs
		}
		theirs = append(theirs, q)
	}
	if fmt.Sprint(theirs) != fmt.Sprint(want) {
		t.Fatalf("offload-lock status %v\nwant                %v", theirs, want)
	}
	if board.Priority == nil || *board.Priority != 3 || board.ExpectMs == nil || *board.ExpectMs != 600000 || board.FreeInMs == nil {
		t.Fatalf("status holder: priority %v expectMs %v freeInMs %v", board.Priority, board.ExpectMs, board.FreeInMs)
	}
	freeIn := time.Duration(*board.FreeInMs) * time.Millisecond
	if d := time.Until(Inspect(lockPath).ExpectedFree); d-freeIn > 2*time.Second || freeIn-d > 2*time.Second {
		t.Fatalf("ExpectedFree in %v, status says freeInMs %v", d, freeIn)
	}

	// Released: served in queue order.
	holder.stop()
	for i, done := range runDone {
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("run %d did not finish; stderr: %s", i, runErrs[i].String())
		}
	}
	order, err := os.ReadFile(served)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(order)); strings.Join(got, " ") != "high mid low" {
		t.Fatalf("served in the order %v, want high mid low", got)
	}
	if ws := Waiters(lockPath); ws != nil {
		t.Fatalf("after the queue drained: %v (the unlocked copy must not count)", gotQueue(ws))
	}
}
