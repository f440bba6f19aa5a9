package gpulock

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// durationTable is read by ParseDuration and by the offload-lock command
// alike; the want column is what both must give (-1: refused).
var durationTable = []struct {
	in   string
	want time.Duration
}{
	{"0", 0},
	{"5", 5 * time.Second},
	{"1.5", 1500 * time.Millisecond},
	{".25", 250 * time.Millisecond},
	{"5.", 5 * time.Second},
	{"250ms", 250 * time.Millisecond},
	{"2s", 2 * time.Second},
	{"1.5m", 90 * time.Second},
	{"1h", time.Hour},
	{"0.0001s", time.Millisecond},
	{"1h30m", 90 * time.Minute},
	{"2m30s", 150 * time.Second},
	{"1d", 24 * time.Hour},
	{"1d12h", 36 * time.Hour},
	{"1m0.5s", 60500 * time.Millisecond},
	{"1h0m0s", time.Hour},
	{"1s250ms", 1250 * time.Millisecond},
	{"forever", Forever},
	{"", -1}, {"-1", -1}, {"-0", -1}, {"+5", -1}, {"1e3", -1}, {"abc", -1}, {"5x", -1}, {"5 s", -1}, {" 5", -1},
	{"1..2", -1}, {".", -1}, {"ms", -1}, {"s", -1}, {"inf", -1}, {"nan", -1}, {"0x10", -1}, {"1msms", -1},
	{"99999999999999999999", -1}, {"400000000000", -1}, {"Forever", -1}, {"1h1h", -1}, {"30m1h", -1},
	{"1m30", -1}, {"1h 30m", -1}, {"h1", -1}, {"1w", -1}, {"1d-1h", -1}, {"5000d", -1}, {".m", -1},
	{"1s.5", -1}, {"1us", -1}, {"1ns", -1}, {"-1s", -1},
}

func TestParseDuration(t *testing.T) {
	for _, c := range durationTable {
		got, err := ParseDuration(c.in)
		if c.want < 0 {
			if err == nil || !errors.Is(err, ErrDuration) {
				t.Errorf("ParseDuration(%q) = %v, %v; want an ErrDuration", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestDescribeDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{850 * time.Millisecond, "850ms"}, {42 * time.Second, "42s"}, {312 * time.Second, "5m12s"},
		{2*time.Hour + 3*time.Minute + 59*time.Second, "2h03m"}, {-5 * time.Second, "-5s"}, {0, "0ms"},
	} {
		if got := DescribeDuration(c.d); got != c.want {
			t.Errorf("DescribeDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestSlotPath(t *testing.T) {
	if SlotPath("/x/gpu.lock", 0) != "/x/gpu.lock" || SlotPath("/x/gpu.lock", -1) != "/x/gpu.lock" ||
		SlotPath("/x/gpu.lock", 3) != "/x/gpu.lock.gpu3" {
		t.Fatal("slot paths")
	}
}

// TestGrammarAgreesWithTheCommand runs the table through offload-lock: a
// duration the command refuses is a usage error (exit 2) of `wait-free
// --wait`, and the value it accepts for `--expect` is the expectMs it
// records, which Inspect reads back.
func TestGrammarAgreesWithTheCommand(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	lockPath := filepath.Join(t.TempDir(), "gpu.lock")
	for _, c := range durationTable {
		err := exec.Command(bin, "--lock", lockPath, "--quiet", "wait-free", "--wait", c.in).Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if accepted, want := code != 2, c.want >= 0; accepted != want {
			t.Errorf("offload-lock wait-free --wait %q: exit %d; Go's table says accepted=%v", c.in, code, want)
		}
		if c.want <= 0 || c.want == Forever {
			continue // --expect takes finite durations longer than 0
		}
		h := startHold(t, bin, lockPath, "--wait", "0", "--expect", c.in)
		got := Inspect(lockPath).ExpectMs
		h.stop()
		if want, _ := ParseDuration(c.in); got != want.Milliseconds() {
			t.Errorf("--expect %q: offload-lock recorded %d ms, ParseDuration gives %d ms", c.in, got, want.Milliseconds())
		}
	}
}

// TestDescribeAgreesWithTheCommand: a labelled holder with a host, and an
// unlabelled v1 holder named by its process's name, read the same in Go
// and in `offload-lock status`; and the slots Go counts are those status
// shows.
func TestDescribeAgreesWithTheCommand(t *testing.T) {
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	host, _ := os.Hostname()
	pid := strconv.Itoa(sleeper.Process.Pid)
	// Held for 2h03m30s by the meta.json mtime (no startedAt, so the
	// holder's own start does not matter), judged with a 3 h TTL: the
	// minute shown stays the same for 30 s.
	age := 2*time.Hour + 3*time.Minute + 30*time.Second
	for _, meta := range []string{
		`{"pid":` + pid + `,"label":"render","host":"` + host + `"}`,
		`{"pid":` + pid + `}`,
	} {
		lockPath := filepath.Join(t.TempDir(), "gpu.lock")
		if err := os.Mkdir(lockPath, 0o755); err != nil {
			t.Fatal(err)
		}
		metaPath := filepath.Join(lockPath, "meta.json")
		if err := os.WriteFile(metaPath, []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-age)
		if err := os.Chtimes(metaPath, then, then); err != nil {
			t.Fatal(err)
		}
		got := DescribeState(InspectTTL(lockPath, 3*time.Hour))
		out, _ := exec.Command(bin, "--lock", lockPath, "--ttl", "3h", "status").Output()
		line := strings.SplitN(string(out), "\n", 2)[0]
		// The command may add what the other participants would conclude
		// ("; Node runners would judge it stale ...") after the same words.
		if line != got && !strings.HasPrefix(line, got+"; ") {
			t.Errorf("meta %s: Go says %q, offload-lock status says %q", meta, got, line)
		}
		if !strings.HasPrefix(got, "held by ") || !strings.HasSuffix(got, " for 2h03m") {
			t.Errorf("DescribeState = %q", got)
		}
	}
	if got := DescribeHolder(Info{Held: true, PID: sleeper.Process.Pid}); got != "sleep (pid "+pid+")" {
		t.Errorf("an unlabelled holder on this host: %q", got)
	}

	// Slots beside a lock: Go counts what status shows.
	lockPath := filepath.Join(t.TempDir(), "gpu.lock")
	if err := os.Mkdir(lockPath+".gpu2", 0o755); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(bin, "--lock", lockPath, "--json", "status").Output()
	var status struct {
		Slots []json.RawMessage `json:"slots"`
	}
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("status --json: %v: %s", err, out)
	}
	if n := SlotCount(lockPath); n != 3 || len(status.Slots) != n {
		t.Errorf("SlotCount = %d, status shows %d slots", n, len(status.Slots))
	}
	if got := InspectSlots(lockPath, Options{}); len(got) != 3 {
		t.Errorf("InspectSlots: %d slots", len(got))
	}
}
