package gpulock

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// liveClaim writes a gpulease claim naming the live process pid (with its
// start) into <root>/gpu/lease.
func liveClaim(t *testing.T, root string, pid int) {
	t.Helper()
	_, ticks, ok := readProcStat(pid)
	if !ok {
		t.Skip("cannot read /proc/<pid>/stat")
	}
	dir := filepath.Join(root, "gpu", "lease")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	claim := fmt.Sprintf(`{"epoch":4,"class":"media","holder":{"pid":%d,"start_time_ms":%d},"reason":"go","acquired_at_ms":%d,"expires_at_ms":%d,"renewed_at_ms":%d}`,
		pid, ticks, now, now+600000, now)
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(claim), 0o666); err != nil {
		t.Fatal(err)
	}
}

// statusBusy is `offload-lock --json status`'s busy for lock, in this
// process's environment.
func statusBusy(t *testing.T, bin, lock string) bool {
	t.Helper()
	out, _ := exec.Command(bin, "--lock", lock, "--json", "status").Output()
	var j struct {
		Busy *bool `json:"busy"`
	}
	if err := json.Unmarshal(out, &j); err != nil || j.Busy == nil {
		t.Fatalf("status --json: %v: %s", err, out)
	}
	return *j.Busy
}

// TestInspectGPUAgreesWithTheCommand: the same files and environment, the
// same answer to "is the GPU busy" as offload-lock's, wherever the lease is
// placed or not taken at all.
func TestInspectGPUAgreesWithTheCommand(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	base := t.TempDir()
	lock := filepath.Join(base, "gpu.lock")
	self := os.Getpid()
	cases := []struct {
		name                   string
		root, via              string // the state root, and which variable names it
		claim, gpuLock, unread bool
		busy                   bool
	}{
		{"OFFLOAD_LOCK_LEASE_ROOT, held", "r1", "OFFLOAD_LOCK_LEASE_ROOT", true, false, false, true},
		{"OFFLOAD_LOCK_LEASE_ROOT, free", "r2", "OFFLOAD_LOCK_LEASE_ROOT", false, false, false, false},
		{"LOCAL_OFFLOAD_STATE_DIR, held", "r3", "LOCAL_OFFLOAD_STATE_DIR", true, false, false, true},
		{"a cloud-sync folder gpulease refuses", "Dropbox (Home)/r4", "OFFLOAD_LOCK_LEASE_ROOT", true, false, false, false},
		{"GPU_LOCK set: no lease taken", "r5", "OFFLOAD_LOCK_LEASE_ROOT", true, true, false, false},
		{"a claim that cannot be read", "r6", "OFFLOAD_LOCK_LEASE_ROOT", false, false, true, true},
		{"no root", "", "OFFLOAD_LOCK_LEASE_ROOT", false, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, name := range []string{"GPU_LOCK", "OFFLOAD_LOCK_LEASE_ROOT", "LOCAL_OFFLOAD_STATE_DIR"} {
				t.Setenv(name, "")
			}
			root := filepath.Join(base, "absent")
			if c.root != "" {
				root = filepath.Join(base, c.root)
				os.MkdirAll(root, 0o777)
			}
			t.Setenv(c.via, root)
			if c.gpuLock {
				t.Setenv("GPU_LOCK", lock)
			}
			if c.claim {
				liveClaim(t, root, self)
			}
			if c.unread {
				dir := filepath.Join(root, "gpu", "lease")
				os.MkdirAll(dir, 0o777)
				os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(dir, "meta.json"))
			}
			g := InspectGPU(lock, Options{})
			if g.Busy() != c.busy || statusBusy(t, bin, lock) != c.busy {
				t.Fatalf("InspectGPU busy %v (%+v), offload-lock busy %v; want %v", g.Busy(), g.Lease,
					statusBusy(t, bin, lock), c.busy)
			}
			if g.Lock.Held {
				t.Fatalf("the lock is free, but %+v", g.Lock)
			}
		})
	}
}

// TestWaitGPUFreeWaitsForTheLease: a live gpulease holder keeps the GPU busy
// though the lock is free; its death frees it.
func TestWaitGPUFreeWaitsForTheLease(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"GPU_LOCK", "LOCAL_OFFLOAD_STATE_DIR"} {
		t.Setenv(name, "")
	}
	t.Setenv("OFFLOAD_LOCK_LEASE_ROOT", root)
	holder := exec.Command("sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	liveClaim(t, root, holder.Process.Pid)
	lock := filepath.Join(root, "gpu.lock")
	if g := WaitGPUFree(context.Background(), lock, Options{}); !g.Busy() || g.Lock.Held || g.Lease == nil ||
		g.Lease.PID != holder.Process.Pid {
		t.Fatalf("with a gpulease holder: %+v", g)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		holder.Process.Kill()
		holder.Wait()
	}()
	start := time.Now()
	g := WaitGPUFree(context.Background(), lock, Options{Wait: 20 * time.Second, Poll: 10 * time.Millisecond})
	if g.Busy() || g.Lease == nil || g.Lease.State != LeaseStale {
		t.Fatalf("after the holder died: %+v", g)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("free after %v, before the holder died", waited)
	}
}

// TestInspectGPUInADirectorySharedWithGpulease: GPU_LOCK names the lock and
// gpulease's counter is beside it, so gpulease's claim is the lock's
// meta.json. A live gpulease holder has the GPU, named by its pid; a dead
// one's claim leaves it free (the v1 view alone holds it until the TTL);
// offload-lock says the same of the same files.
func TestInspectGPUInADirectorySharedWithGpulease(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	for _, c := range []struct {
		name    string
		pid     int
		counter bool
		busy    bool
	}{
		{"a live holder", os.Getpid(), true, true},
		{"a dead holder", deadPid(t), true, false},
		{"a dead holder, no counter: a v1 lock alone", deadPid(t), false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, name := range []string{"OFFLOAD_LOCK_LEASE_ROOT", "LOCAL_OFFLOAD_STATE_DIR"} {
				t.Setenv(name, "")
			}
			base := t.TempDir()
			lock := filepath.Join(base, "gpu.lock")
			t.Setenv("GPU_LOCK", lock)
			if c.counter {
				if err := os.WriteFile(filepath.Join(base, "epoch"), []byte("4"), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			ticks := uint64(1)
			if _, tk, ok := readProcStat(c.pid); ok {
				ticks = tk
			}
			if err := os.Mkdir(lock, 0o777); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UnixMilli()
			claim := fmt.Sprintf(`{"epoch":4,"class":"media","holder":{"pid":%d,"start_time_ms":%d},"reason":"go","acquired_at_ms":%d,"expires_at_ms":%d,"renewed_at_ms":%d}`,
				c.pid, ticks, now, now+600000, now)
			if err := os.WriteFile(filepath.Join(lock, "meta.json"), []byte(claim), 0o666); err != nil {
				t.Fatal(err)
			}
			g := InspectGPU(lock, Options{})
			if g.Busy() != c.busy || statusBusy(t, bin, lock) != c.busy {
				t.Fatalf("InspectGPU busy %v (lock %+v, lease %+v), offload-lock busy %v; want %v", g.Busy(), g.Lock,
					g.Lease, statusBusy(t, bin, lock), c.busy)
			}
			if c.counter && c.busy && g.Lock.PID != c.pid {
				t.Fatalf("the holder is pid %d, InspectGPU names %+v", c.pid, g.Lock)
			}
		})
	}
}
