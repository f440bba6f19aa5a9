package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests build the real command and run it as a child process, checking
// its exit code and its one line of JSON.

var wantKeys = []string{"path", "held", "pid", "ageMs", "label", "startedAt", "host", "busy", "busyBy"}

type output struct {
	Path      string `json:"path"`
	Held      bool   `json:"held"`
	PID       int    `json:"pid"`
	AgeMs     int64  `json:"ageMs"`
	Label     string `json:"label"`
	StartedAt int64  `json:"startedAt"`
	Host      string `json:"host"`
	Busy      bool   `json:"busy"`
	BusyBy    string `json:"busyBy"`
}

// buildInspect compiles this command into a fresh temporary directory.
func buildInspect(t *testing.T) string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Skip("go tool not found")
		}
	}
	bin := filepath.Join(t.TempDir(), "gpulock-inspect")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type result struct {
	code   int
	stdout string
	stderr string
}

// runInspect runs the binary with a bounded wall time and extra environment.
func runInspect(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// No gpulease root unless a test names one: whatever this machine has,
	// the lock alone decides (the last of duplicate names wins).
	cmd.Env = append(append(os.Environ(), "OFFLOAD_LOCK_LEASE_ROOT="+filepath.Join(t.TempDir(), "no-lease-root")), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return finish(t, cmd, &stdout, &stderr)
}

// finish waits (at most a generous 60 s) for cmd and collects its result.
func finish(t *testing.T, cmd *exec.Cmd, stdout, stderr *bytes.Buffer) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("gpulock-inspect did not exit; stdout %q stderr %q", stdout, stderr)
	}
	var exitErr *exec.ExitError
	code := 0
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("gpulock-inspect killed by %v; stderr %q", ws.Signal(), stderr)
		}
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// parseLine checks that stdout is exactly one JSON line with the documented
// keys in the documented order, and decodes it.
func parseLine(t *testing.T, r result) output {
	t.Helper()
	if strings.Count(r.stdout, "\n") != 1 || !strings.HasSuffix(r.stdout, "\n") {
		t.Fatalf("stdout is not one line: %q", r.stdout)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var keys []string
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("stdout does not start an object: %q", r.stdout)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("bad JSON %q: %v", r.stdout, err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("bad JSON %q: %v", r.stdout, err)
		}
	}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("keys %v, want %v", keys, wantKeys)
	}
	var o output
	if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// makeLock creates a lock directory with the given meta.json bytes.
func makeLock(t *testing.T, dir, meta string) string {
	t.Helper()
	p := filepath.Join(dir, "local-offload-gpu.lock")
	if err := os.Mkdir(p, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "meta.json"), []byte(meta), 0o666); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGpulockInspect(t *testing.T) {
	bin := buildInspect(t)
	self := os.Getpid()
	const started = int64(1764470000000)
	heldMeta := fmt.Sprintf(`{"pid":%d,"startedAt":%d,"token":"t","label":"render <step> & co","host":"gpu-box","tool":"offload-lock/1"}`, self, started)
	wantHeld := func(path string) output {
		return output{Path: path, Held: true, PID: self, Label: "render <step> & co", StartedAt: started, Host: "gpu-box",
			Busy: true, BusyBy: "lock"}
	}

	checkHeld := func(t *testing.T, r result, want output) {
		t.Helper()
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d stderr %q, want 0 and nothing", r.code, r.stderr)
		}
		got := parseLine(t, r)
		if got.AgeMs < 0 || got.AgeMs > 60_000 {
			t.Errorf("ageMs = %d, want a fresh lock's age", got.AgeMs)
		}
		got.AgeMs = 0
		if got != want {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
	checkFree := func(t *testing.T, r result, path string) {
		t.Helper()
		if r.code != 1 || r.stderr != "" {
			t.Fatalf("exit %d stderr %q, want 1 and nothing", r.code, r.stderr)
		}
		if got := parseLine(t, r); got != (output{Path: path}) {
			t.Fatalf("got %+v, want free at %q", got, path)
		}
	}

	t.Run("held", func(t *testing.T) {
		p := makeLock(t, t.TempDir(), heldMeta)
		r := runInspect(t, bin, nil, p)
		checkHeld(t, r, wantHeld(p))
		// The label is printed verbatim, without HTML escaping.
		if !strings.Contains(r.stdout, `"label":"render <step> & co"`) {
			t.Fatalf("label escaped: %q", r.stdout)
		}
	})

	t.Run("held by a null meta: pid 0, startedAt 0", func(t *testing.T) {
		p := makeLock(t, t.TempDir(), "null")
		checkHeld(t, runInspect(t, bin, nil, p), output{Path: p, Held: true, Busy: true, BusyBy: "lock"})
	})

	t.Run("busy: a gpulease holder has the GPU though the lock is free", func(t *testing.T) {
		root := t.TempDir()
		lease := filepath.Join(root, "gpu", "lease")
		if err := os.MkdirAll(lease, 0o777); err != nil {
			t.Fatal(err)
		}
		stat, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			t.Skip("no /proc/self/stat")
		}
		// The process's start, field 22 (after the command's closing paren).
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		now := time.Now().UnixMilli()
		claim := fmt.Sprintf(`{"epoch":3,"class":"media","holder":{"pid":%d,"start_time_ms":%s},"acquired_at_ms":%d,"expires_at_ms":%d,"renewed_at_ms":%d}`,
			self, fields[19], now, now+600000, now)
		if err := os.WriteFile(filepath.Join(lease, "meta.json"), []byte(claim), 0o644); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "free.lock")
		env := []string{"OFFLOAD_LOCK_LEASE_ROOT=" + root, "GPU_LOCK="}
		for _, args := range [][]string{{p}, {"-wait", "100ms", p}} {
			r := runInspect(t, bin, env, args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("%v: exit %d stderr %q, want 0 (busy)", args, r.code, r.stderr)
			}
			if got := parseLine(t, r); got != (output{Path: p, Busy: true, BusyBy: "gpulease"}) {
				t.Fatalf("%v: got %+v", args, got)
			}
		}
		// GPU_LOCK names the lease directory for gpulease: no lease is taken, the lock decides.
		checkFree(t, runInspect(t, bin, []string{"OFFLOAD_LOCK_LEASE_ROOT=" + root, "GPU_LOCK=" + p}), p)
	})

	t.Run("free: missing", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "nope.lock")
		checkFree(t, runInspect(t, bin, nil, p), p)
	})

	t.Run("free: float pid", func(t *testing.T) {
		p := makeLock(t, t.TempDir(), `{"pid":123.0,"startedAt":1}`)
		checkFree(t, runInspect(t, bin, nil, p), p)
	})

	t.Run("ttl flag", func(t *testing.T) {
		p := makeLock(t, t.TempDir(), heldMeta)
		old := time.Now().Add(-2 * time.Minute)
		if err := os.Chtimes(filepath.Join(p, "meta.json"), old, old); err != nil {
			t.Fatal(err)
		}
		checkFree(t, runInspect(t, bin, nil, "-ttl", "1m", p), p)
		// -ttl applies while waiting too: free at once, not after an hour.
		checkFree(t, runInspect(t, bin, nil, "-ttl", "1m", "-wait", "1h", "-poll", "1h", p), p)
		r := runInspect(t, bin, nil, "-ttl", "1h", p)
		if r.code != 0 {
			t.Fatalf("-ttl 1h: exit %d, want 0", r.code)
		}
		if got := parseLine(t, r); got.AgeMs < 120_000 || got.AgeMs > 180_000 {
			t.Fatalf("ageMs = %d, want about 2 minutes", got.AgeMs)
		}
	})

	t.Run("default path from GPU_LOCK", func(t *testing.T) {
		p := makeLock(t, t.TempDir(), heldMeta)
		checkHeld(t, runInspect(t, bin, []string{"GPU_LOCK=" + p}), wantHeld(p))
	})

	t.Run("default path from TMPDIR, TMP ignored", func(t *testing.T) {
		dir := t.TempDir()
		p := makeLock(t, dir, heldMeta)
		env := []string{"GPU_LOCK=", "TMPDIR=" + dir + "/", "TMP=/nonexistent"}
		checkHeld(t, runInspect(t, bin, env), wantHeld(p))
	})

	t.Run("wait on a held lock: held after the wait", func(t *testing.T) {
		p := makeLock(t, t.TempDir(), heldMeta)
		start := time.Now()
		r := runInspect(t, bin, nil, "-wait", "100ms", "-poll", "10ms", p)
		if el := time.Since(start); el < 100*time.Millisecond {
			t.Fatalf("returned after %v, before the 100ms wait", el)
		}
		checkHeld(t, r, wantHeld(p))
	})

	t.Run("wait on a free lock", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "nope.lock")
		checkFree(t, runInspect(t, bin, nil, "-wait", "1h", p), p)
	})

	t.Run("SIGINT ends the wait with the last inspection", func(t *testing.T) {
		testSignal(t, bin, heldMeta, wantHeld)
	})

	for _, args := range [][]string{
		{"a", "b"},
		{"-bogus"},
		{"-ttl", "soon"},
		{"-ttl", "0s"},
		{"-wait"},
		{"-h"},
	} {
		args := args
		t.Run("usage error "+strings.Join(args, " "), func(t *testing.T) {
			r := runInspect(t, bin, nil, args...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2", r.code)
			}
			if r.stdout != "" {
				t.Fatalf("stdout %q, want nothing", r.stdout)
			}
			if strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") || !strings.Contains(r.stderr, "usage:") {
				t.Fatalf("stderr %q, want one usage line", r.stderr)
			}
		})
	}
}

// testSignal checks that SIGINT during -wait makes the command print the last
// inspection and exit by its own code, not die of the signal.
//
// It waits for an event instead of sleeping: meta.json is a FIFO, so the
// command's first inspection blocks opening it until this test opens the
// write end. The command installs its signal handler before it inspects, so
// once that open returns the signal can be sent safely. The test then writes
// a held meta; with -wait and -poll of an hour, only the signal can end the
// wait.
func testSignal(t *testing.T, bin, meta string, want func(string) output) {
	dir := t.TempDir()
	p := filepath.Join(dir, "local-offload-gpu.lock")
	if err := os.Mkdir(p, 0o777); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(p, "meta.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}

	cmd := exec.Command(bin, "-wait", "1h", "-poll", "1h", p)
	cmd.Env = append(os.Environ(), "OFFLOAD_LOCK_LEASE_ROOT="+filepath.Join(dir, "no-lease-root"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	opened := make(chan *os.File, 1)
	openErr := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			openErr <- err
			return
		}
		opened <- f
	}()
	var w *os.File
	select {
	case w = <-opened:
	case err := <-openErr:
		_ = cmd.Process.Kill()
		t.Fatalf("opening the FIFO: %v", err)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// Unblock our own pending open by supplying a reader.
		if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer r.Close()
		}
		t.Fatalf("gpulock-inspect never opened meta.json; stderr %q", stderr.String())
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString(meta); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	r := finish(t, cmd, &stdout, &stderr)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d stderr %q, want 0 (held) and nothing", r.code, r.stderr)
	}
	got := parseLine(t, r)
	got.AgeMs = 0
	if got != want(p) {
		t.Fatalf("got %+v, want %+v", got, want(p))
	}
}
