package gpulock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldLock creates a lock held by this (live) process.
func heldLock(t *testing.T) string {
	t.Helper()
	meta := fmt.Sprintf(`{"pid":%d,"startedAt":%d,"label":"wait-test"}`, os.Getpid(), time.Now().UnixMilli())
	return makeLock(t, filepath.Join(t.TempDir(), DefaultLockName), []byte(meta))
}

// counter wraps Inspect, counts calls, and closes sawHeld the first time an
// inspection reports the lock held.
type counter struct {
	n       int64
	once    sync.Once
	sawHeld chan struct{}
}

func newCounter() *counter { return &counter{sawHeld: make(chan struct{})} }

func (c *counter) inspect(p string) Info {
	atomic.AddInt64(&c.n, 1)
	info := Inspect(p)
	if info.Held {
		c.once.Do(func() { close(c.sawHeld) })
	}
	return info
}

func (c *counter) count() int64 { return atomic.LoadInt64(&c.n) }

// generous bounds "promptly": far above what any of these waits needs, far
// below the hour-long waits and polls they are compared with.
const generous = 10 * time.Second

// within runs f and fails the test if it has not returned after generous, so
// a wait that would hang for an hour fails fast instead. It returns f's
// result and how long it took.
func within(t *testing.T, f func() Info) (Info, time.Duration) {
	t.Helper()
	type res struct {
		info Info
		el   time.Duration
	}
	ch := make(chan res, 1)
	start := time.Now()
	go func() {
		info := f()
		ch <- res{info, time.Since(start)}
	}()
	select {
	case r := <-ch:
		return r.info, r.el
	case <-time.After(generous):
		t.Fatalf("still waiting after %v", generous)
		return Info{}, 0
	}
}

func TestWaitFreeAlreadyFree(t *testing.T) {
	c := newCounter()
	got, _ := within(t, func() Info {
		return waitFree(context.Background(), filepath.Join(t.TempDir(), "nope"), time.Hour, time.Hour, c.inspect)
	})
	if got != (Info{}) {
		t.Fatalf("got %+v, want free", got)
	}
	if c.count() != 1 {
		t.Fatalf("inspections = %d, want 1", c.count())
	}
}

func TestWaitFreeReturnsWhenReleased(t *testing.T) {
	lockPath := heldLock(t)
	c := newCounter()
	released := make(chan error, 1)
	go func() {
		<-c.sawHeld // release only once the waiter has seen the lock held
		released <- os.RemoveAll(lockPath)
	}()
	// An hour-long wait: only the release can end it promptly.
	got, _ := within(t, func() Info {
		return waitFree(context.Background(), lockPath, time.Hour, 5*time.Millisecond, c.inspect)
	})
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if got != (Info{}) {
		t.Fatalf("got %+v, want free", got)
	}
	if c.count() < 2 {
		t.Fatalf("inspections = %d, want held then free", c.count())
	}
}

// TestWaitFreeRealInspect runs the exported WaitFree (default TTL) end to end.
func TestWaitFreeRealInspect(t *testing.T) {
	lockPath := heldLock(t)
	got, _ := within(t, func() Info { return WaitFree(context.Background(), lockPath, 0, time.Millisecond) })
	if !got.Held || got.PID != os.Getpid() || got.Label != "wait-test" {
		t.Fatalf("held lock: got %+v", got)
	}
	if err := os.RemoveAll(lockPath); err != nil {
		t.Fatal(err)
	}
	got, _ = within(t, func() Info { return WaitFree(context.Background(), lockPath, time.Hour, time.Hour) })
	if got != (Info{}) {
		t.Fatalf("removed lock: got %+v, want free", got)
	}
}

func TestWaitFreeHeldUntilWaitElapses(t *testing.T) {
	lockPath := heldLock(t)
	const wait = 150 * time.Millisecond
	c := newCounter()
	got, el := within(t, func() Info {
		return waitFree(context.Background(), lockPath, wait, 20*time.Millisecond, c.inspect)
	})
	if !got.Held || got.PID != os.Getpid() || got.Label != "wait-test" {
		t.Fatalf("got %+v, want held by this process", got)
	}
	// Timers never fire early, so the final inspection comes after the
	// deadline.
	if el < wait {
		t.Fatalf("returned after %v, before the %v wait", el, wait)
	}
	if c.count() < 2 {
		t.Fatalf("inspections = %d, want several", c.count())
	}
}

// TestWaitFreeLastSleepShortened: with a poll far longer than the wait, the
// one sleep is cut to the wait, followed by one final inspection.
func TestWaitFreeLastSleepShortened(t *testing.T) {
	lockPath := heldLock(t)
	const wait = 50 * time.Millisecond
	c := newCounter()
	got, el := within(t, func() Info {
		return waitFree(context.Background(), lockPath, wait, time.Hour, c.inspect)
	})
	if !got.Held {
		t.Fatalf("got %+v, want held", got)
	}
	if el < wait {
		t.Fatalf("returned after %v, before the %v wait", el, wait)
	}
	if c.count() != 2 {
		t.Fatalf("inspections = %d, want 2 (start and deadline)", c.count())
	}
}

func TestWaitFreeZeroWaitInspectsOnce(t *testing.T) {
	lockPath := heldLock(t)
	for _, wait := range []time.Duration{0, -time.Second} {
		c := newCounter()
		got, _ := within(t, func() Info {
			return waitFree(context.Background(), lockPath, wait, time.Hour, c.inspect)
		})
		if !got.Held {
			t.Fatalf("wait %v: got %+v, want held", wait, got)
		}
		if c.count() != 1 {
			t.Fatalf("wait %v: inspections = %d, want 1", wait, c.count())
		}
	}
}

func TestWaitFreeContextCancelled(t *testing.T) {
	lockPath := heldLock(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCounter()
	go func() {
		<-c.sawHeld
		// Cancel once the waiter is past its first inspection. The short
		// pause makes it all but certain that the cancel lands while the
		// waiter sleeps in its select (the path this test is for); the
		// assertions hold whichever path sees the cancel.
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	// Wait and poll of an hour: only the context can end this promptly.
	got, _ := within(t, func() Info { return waitFree(ctx, lockPath, time.Hour, time.Hour, c.inspect) })
	if !got.Held || got.PID != os.Getpid() {
		t.Fatalf("got %+v, want the last (held) inspection", got)
	}
	if c.count() != 1 {
		t.Fatalf("inspections = %d, want 1 (no inspection after the cancel)", c.count())
	}
}

func TestWaitFreeContextAlreadyDone(t *testing.T) {
	lockPath := heldLock(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := newCounter()
	got, _ := within(t, func() Info { return waitFree(ctx, lockPath, time.Hour, time.Hour, c.inspect) })
	if !got.Held {
		t.Fatalf("got %+v, want held", got)
	}
	if c.count() != 1 {
		t.Fatalf("inspections = %d, want 1", c.count())
	}
}

func TestWaitFreeNilContext(t *testing.T) {
	lockPath := heldLock(t)
	// A nil context is documented to mean context.Background().
	got, _ := within(t, func() Info { return WaitFree(nil, lockPath, 10*time.Millisecond, time.Millisecond) })
	if !got.Held {
		t.Fatalf("got %+v, want held", got)
	}
}

// TestWaitFreePollRaised checks that a poll below 1 ms is raised to 1 ms:
// over a 100 ms wait that allows about 100 inspections, whereas an unraised
// zero or negative poll spins and inspects thousands of times.
func TestWaitFreePollRaised(t *testing.T) {
	lockPath := heldLock(t)
	const wait = 100 * time.Millisecond
	for _, poll := range []time.Duration{0, -time.Second, time.Nanosecond, 999 * time.Microsecond} {
		c := newCounter()
		got, _ := within(t, func() Info {
			return waitFree(context.Background(), lockPath, wait, poll, c.inspect)
		})
		if !got.Held {
			t.Fatalf("poll %v: got %+v, want held", poll, got)
		}
		// 300 leaves room for clock slack while staying far below a
		// spinning loop.
		if c.count() > 300 {
			t.Fatalf("poll %v: %d inspections in %v, want about %d (poll raised to 1ms)", poll, c.count(), wait, wait/time.Millisecond+1)
		}
	}
}

func TestWaitFreeTTL(t *testing.T) {
	lockPath := heldLock(t)
	setMetaMtime(t, lockPath, time.Now().Add(-2*time.Minute))
	// wait 0: one inspection, so a TTL that is not applied fails fast.
	got, _ := within(t, func() Info { return WaitFreeTTL(context.Background(), lockPath, time.Minute, 0, time.Hour) })
	if got != (Info{}) {
		t.Fatalf("TTL 1m on a 2m-old meta: got %+v, want free", got)
	}
	got, _ = within(t, func() Info { return WaitFreeTTL(context.Background(), lockPath, time.Hour, 0, time.Hour) })
	if !got.Held {
		t.Fatalf("TTL 1h on a 2m-old meta: got %+v, want held", got)
	}
}
