package gpulock

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLeaseDirPrecedence(t *testing.T) {
	for _, name := range []string{"GPU_LOCK", "OFFLOAD_LOCK_LEASE_ROOT", "LOCAL_OFFLOAD_STATE_DIR"} {
		t.Setenv(name, "")
	}
	if got := LeaseDir(""); got != "/var/lib/local-offload/gpu/lease" {
		t.Fatalf("default: %q", got)
	}
	t.Setenv("LOCAL_OFFLOAD_STATE_DIR", "/srv/b")
	if got := LeaseDir(""); got != "/srv/b/gpu/lease" {
		t.Fatalf("LOCAL_OFFLOAD_STATE_DIR: %q", got)
	}
	t.Setenv("OFFLOAD_LOCK_LEASE_ROOT", " /srv/a/ ")
	if got := LeaseDir(""); got != "/srv/a/gpu/lease" {
		t.Fatalf("OFFLOAD_LOCK_LEASE_ROOT: %q", got)
	}
	t.Setenv("GPU_LOCK", "/tmp/x.lock")
	if got := LeaseDir(""); got != "/tmp/x.lock" {
		t.Fatalf("GPU_LOCK: %q", got)
	}
	if got := LeaseDir("/o"); got != "/o" {
		t.Fatalf("override: %q", got)
	}
}

// statusLease is the "gpulease" object of `offload-lock --json status`
// with the lease under root.
func statusLease(t *testing.T, bin, root string) map[string]interface{} {
	t.Helper()
	cmd := exec.Command(bin, "--lock", filepath.Join(root, "gpu.lock"), "--json", "status")
	cmd.Env = append(os.Environ(), "OFFLOAD_LOCK_LEASE_ROOT="+root, "GPU_LOCK=")
	out, _ := cmd.Output()
	var j map[string]json.RawMessage
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatalf("status --json: %v: %s", err, out)
	}
	var lease map[string]interface{}
	if err := json.Unmarshal(j["gpulease"], &lease); err != nil || lease == nil {
		t.Fatalf("status --json has no gpulease object: %s", out)
	}
	return lease
}

// agree checks InspectLease against the command on the same files.
func agree(t *testing.T, bin, root string) LeaseInfo {
	t.Helper()
	got := InspectLease(filepath.Join(root, "gpu", "lease"))
	cli := statusLease(t, bin, root)
	num := func(k string) float64 { f, _ := cli[k].(float64); return f }
	str := func(k string) string { s, _ := cli[k].(string); return s }
	if string(got.State) != str("state") || got.InProgress != cli["inProgress"] ||
		got.ReadersHeld != cli["gpuleaseReadersHeld"] || float64(got.PID) != num("pid") ||
		got.Class != str("class") || float64(got.Epoch) != num("epoch") || got.Reason != str("reason") {
		t.Fatalf("InspectLease %+v, but offload-lock --json status says %v", got, cli)
	}
	if got.State != LeaseFree && cli["renewedAtMs"] != nil && float64(got.RenewedAt.UnixMilli()) != num("renewedAtMs") {
		t.Fatalf("renewed at %v here, %v there", got.RenewedAt.UnixMilli(), cli["renewedAtMs"])
	}
	return got
}

func ownTicks(t *testing.T) int64 {
	_, ticks, ok := readProcStat(os.Getpid())
	if !ok {
		t.Skip("cannot read /proc/self/stat")
	}
	return int64(ticks)
}

func TestInspectLeaseAgreesWithTheCommand(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "gpu", "lease")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	self, ticks := os.Getpid(), ownTicks(t)
	claim := func(epoch uint64, pid int, start int64, renewedAgo, windowLeft int64) string {
		return fmt.Sprintf(`{"epoch":%d,"class":"media","holder":{"pid":%d,"start_time_ms":%d},"reason":"go","acquired_at_ms":%d,"expires_at_ms":%d,"renewed_at_ms":%d}`,
			epoch, pid, start, now-1000, now+windowLeft, now-renewedAgo)
	}
	cases := []struct {
		name      string
		claim     string
		old       bool   // the claim's mtime 11 s ago
		heartbeat string // hb.<epoch>, "" for none
		state     LeaseState
	}{
		{"no claim", "", false, "", LeaseFree},
		{"alive", claim(3, self, ticks, 5000, 600000), false, "", LeaseHeld},
		{"holder gone", claim(4, deadPid(t), 0, 5000, 600000), false, "", LeaseStale},
		{"pid reused", claim(5, self, ticks+1, 5000, 600000), false, "", LeaseStale},
		{"stale heartbeat, window open", claim(6, self, ticks, 130000, 60000), false, "", LeaseHeld},
		{"stale heartbeat, window over", claim(7, self, ticks, 130000, -1000), false, "", LeaseStale},
		{"a fresh hb.<epoch> counts", claim(8, self, ticks, 130000, -1000), false, fmt.Sprint(now), LeaseHeld},
		{"no pid, window over", claim(9, 0, 0, 0, -1), false, "", LeaseStale},
		{"being written", `{"epo`, false, "", LeaseHeld},
		{"unparseable and old", `{"epo`, true, "", LeaseStale},
		{"a v1 record", fmt.Sprintf(`{"pid":%d,"startedAt":%d}`, self, now), false, "", LeaseStale},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.RemoveAll(dir)
			os.MkdirAll(dir, 0o777)
			if c.claim != "" {
				p := filepath.Join(dir, "meta.json")
				os.WriteFile(p, []byte(c.claim), 0o666)
				if c.old {
					old := time.Now().Add(-11 * time.Second)
					os.Chtimes(p, old, old)
				}
				if c.heartbeat != "" {
					var e struct{ Epoch uint64 }
					json.Unmarshal([]byte(c.claim), &e)
					os.WriteFile(filepath.Join(dir, fmt.Sprintf("hb.%d", e.Epoch)), []byte(c.heartbeat), 0o666)
				}
			}
			if got := agree(t, bin, root); got.State != c.state {
				t.Fatalf("state %s, want %s (%s)", got.State, c.state, got.Why)
			}
		})
	}
	t.Run("a symlinked claim is unknown", func(t *testing.T) {
		os.RemoveAll(dir)
		os.MkdirAll(dir, 0o777)
		target := filepath.Join(root, "elsewhere")
		os.WriteFile(target, []byte(claim(3, self, ticks, 5000, 600000)), 0o666)
		os.Symlink(target, filepath.Join(dir, "meta.json"))
		if got := agree(t, bin, root); got.State != LeaseUnknown {
			t.Fatalf("state %s, want unknown", got.State)
		}
	})
}

func deadPid(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestInspectLeaseNamesAGpuleaseHolder: a real gpulease participant (the
// stand-in the interop tests use) holding the lease.
func TestInspectLeaseNamesAGpuleaseHolder(t *testing.T) {
	bin := offloadLockBin(t)
	standin := filepath.Join(filepath.Dir(bin), "gpulease-standin")
	if bin == "" || func() bool { _, err := os.Stat(standin); return err != nil }() {
		t.Skip("offload-lock or gpulease-standin not built")
	}
	root := t.TempDir()
	cmd := exec.Command(standin, "hold", "-state-dir", root, "-class", "text", "-reason", "go reader")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var acquired string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "acquired ") {
			acquired = sc.Text()
			break
		}
	}
	var pid int
	var epoch uint64
	if _, err := fmt.Sscanf(acquired, "acquired %d %d", &pid, &epoch); err != nil {
		t.Fatalf("stand-in said %q", acquired)
	}
	got := agree(t, bin, root)
	if !got.Held() || got.PID != pid || got.Epoch != epoch || got.Class != "text" || got.Reason != "go reader" || !got.ReadersHeld {
		t.Fatalf("%+v, want held by the stand-in (pid %d, epoch %d)", got, pid, epoch)
	}
}
