package gpulock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// The EPERM rule (kill(pid, 0) failing with EPERM means alive) needs an
// inspector that may not signal the holder. As root, the test re-executes
// this test binary as an unprivileged user (uid/gid 65534) in a child mode
// that inspects a lock held by the root test process; as a non-root user, it
// uses pid 1 when signalling it gives EPERM.

const childEnv = "GPULOCK_TEST_INSPECT_CHILD"

func TestMain(m *testing.M) {
	if lockPath := os.Getenv(childEnv); lockPath != "" {
		inspectChild(lockPath)
		return
	}
	os.Exit(m.Run())
}

// inspectChild prints "held pid eperm" for the lock, where eperm says whether
// kill(pid, 0) fails with EPERM for this process, so the parent can check the
// premise.
func inspectChild(lockPath string) {
	info := Inspect(lockPath)
	pid, _ := strconv.Atoi(os.Getenv(childEnv + "_PID"))
	fmt.Printf("%t %d %t\n", info.Held, info.PID, errors.Is(syscall.Kill(pid, 0), syscall.EPERM))
	os.Exit(0)
}

func TestInspectEPERMIsAlive(t *testing.T) {
	if os.Geteuid() != 0 {
		if err := syscall.Kill(1, 0); !errors.Is(err, syscall.EPERM) {
			t.Skipf("not root and kill(1, 0) = %v, not EPERM: no holder to test with", err)
		}
		lockPath := makeLock(t, filepath.Join(t.TempDir(), DefaultLockName), []byte(`{"pid":1,"startedAt":1}`))
		if got := Inspect(lockPath); !got.Held || got.PID != 1 {
			t.Fatalf("holder pid 1 (EPERM): got %+v, want held", got)
		}
		return
	}

	// Everything the child touches must be reachable by uid 65534.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "inspect-child")
	copyFile(t, self, bin, 0o755)
	holder := os.Getpid()
	lockPath := makeLock(t, filepath.Join(dir, DefaultLockName), []byte(fmt.Sprintf(`{"pid":%d,"startedAt":1}`, holder)))

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), childEnv+"="+lockPath, childEnv+"_PID="+strconv.Itoa(holder))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			// Could not even start it (e.g. TMPDIR not reachable by 65534).
			t.Skipf("cannot run the inspector as uid 65534: %v", err)
		}
		t.Fatalf("child: %v; stderr %q", err, stderr.String())
	}
	var held bool
	var pid int
	var eperm bool
	if _, err := fmt.Sscanf(stdout.String(), "%t %d %t", &held, &pid, &eperm); err != nil {
		t.Fatalf("child output %q: %v", stdout.String(), err)
	}
	t.Logf("child (uid 65534) output: %q", stdout.String())
	// The premise: the unprivileged child cannot signal us.
	if !eperm {
		t.Fatalf("child's kill(%d, 0) did not fail with EPERM", holder)
	}
	if !held || pid != holder {
		t.Fatalf("child saw held=%t pid=%d, want held by %d (EPERM is alive)", held, pid, holder)
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
