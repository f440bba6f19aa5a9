package gpulock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// makeLock creates lockPath as a directory holding meta.json with the given
// bytes, and returns lockPath.
func makeLock(t *testing.T, lockPath string, meta []byte) string {
	t.Helper()
	if err := os.Mkdir(lockPath, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lockPath, "meta.json"), meta, 0o666); err != nil {
		t.Fatal(err)
	}
	return lockPath
}

// setMetaMtime back-dates (or forward-dates) meta.json.
func setMetaMtime(t *testing.T, lockPath string, mtime time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(lockPath, "meta.json"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting true: %v", err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Wait(); err != nil {
		t.Fatalf("waiting for true: %v", err)
	}
	return pid
}

// padTo pads a JSON object with trailing spaces (valid JSON whitespace) to
// exactly n bytes.
func padTo(t *testing.T, s string, n int) []byte {
	t.Helper()
	if len(s) > n {
		t.Fatalf("padTo: %d > %d", len(s), n)
	}
	return append([]byte(s), bytes.Repeat([]byte{' '}, n-len(s))...)
}

const started = int64(1764470000000)

func TestInspect(t *testing.T) {
	self := os.Getpid()
	selfMeta := fmt.Sprintf(`{"pid":%d,"startedAt":%d}`, self, started)
	heldSelf := Info{Held: true, PID: self, StartedAt: time.UnixMilli(started)}
	fresh := [2]time.Duration{0, time.Minute} // Age bounds for a just-written meta.json

	tests := []struct {
		name string
		// setup builds whatever it needs under dir and returns the lock path.
		setup func(t *testing.T, dir string) string
		ttl   time.Duration // 0 means Inspect (DefaultTTL)
		want  Info          // compared with Age zeroed
		age   [2]time.Duration
	}{
		{
			name:  "missing directory",
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "nope.lock") },
		},
		{
			name: "path is a regular file",
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "file.lock")
				if err := os.WriteFile(p, []byte(selfMeta), 0o666); err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
		{
			name: "directory without meta.json",
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "x.lock")
				if err := os.Mkdir(p, 0o777); err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
		{
			name: "meta.json is a directory",
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "x.lock")
				if err := os.MkdirAll(filepath.Join(p, "meta.json"), 0o777); err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
		{name: "empty meta.json", setup: metaBytes("")},
		{name: "not JSON", setup: metaBytes("hello")},
		{name: "half-written object", setup: metaBytes(`{"pid":12`)},
		{name: "UTF-8 BOM before valid JSON", setup: metaBytes("\xEF\xBB\xBF" + selfMeta)},
		{name: "trailing garbage", setup: metaBytes(selfMeta + "x")},
		{name: "two objects", setup: metaBytes(selfMeta + selfMeta)},
		{
			name:  "null decodes without error: held, pid 0",
			setup: metaBytes("null"),
			want:  Info{Held: true},
			age:   fresh,
		},
		{name: "empty array", setup: metaBytes("[]")},
		{name: "bare number", setup: metaBytes("123")},
		{
			name:  "empty object: held, pid 0",
			setup: metaBytes("{}"),
			want:  Info{Held: true},
			age:   fresh,
		},
		{
			name:  "trailing newline and spaces are fine",
			setup: metaBytes(" \n" + selfMeta + "\n "),
			want:  heldSelf,
			age:   fresh,
		},
		{name: "pid as string", setup: metaBytes(fmt.Sprintf(`{"pid":"%d","startedAt":%d}`, self, started))},
		{name: "pid 1.5", setup: metaBytes(fmt.Sprintf(`{"pid":1.5,"startedAt":%d}`, started))},
		{name: "pid 123.0", setup: metaBytes(fmt.Sprintf(`{"pid":123.0,"startedAt":%d}`, started))},
		{name: "pid 1e2", setup: metaBytes(fmt.Sprintf(`{"pid":1e2,"startedAt":%d}`, started))},
		{name: "pid out of int range", setup: metaBytes(`{"pid":99999999999999999999}`)},
		{name: "pid true", setup: metaBytes(`{"pid":true}`)},
		{name: "startedAt as string", setup: metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":"%d"}`, self, started))},
		{name: "startedAt fractional", setup: metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":1.5}`, self))},
		{
			name:  "pid 0 is not signalled: held",
			setup: metaBytes(fmt.Sprintf(`{"pid":0,"startedAt":%d}`, started)),
			want:  Info{Held: true, PID: 0, StartedAt: time.UnixMilli(started)},
			age:   fresh,
		},
		{
			name:  "pid -5 is not signalled: held, reported as recorded",
			setup: metaBytes(fmt.Sprintf(`{"pid":-5,"startedAt":%d}`, started)),
			want:  Info{Held: true, PID: -5, StartedAt: time.UnixMilli(started)},
			age:   fresh,
		},
		{
			name:  "pid null is pid 0: held",
			setup: metaBytes(`{"pid":null,"startedAt":null}`),
			want:  Info{Held: true},
			age:   fresh,
		},
		{
			name:  "no startedAt: zero time",
			setup: metaBytes(fmt.Sprintf(`{"pid":%d}`, self)),
			want:  Info{Held: true, PID: self},
			age:   fresh,
		},
		{
			name:  "live pid (this process)",
			setup: metaBytes(selfMeta),
			want:  heldSelf,
			age:   fresh,
		},
		{
			// As root kill(1, 0) succeeds; as anyone else it fails with
			// EPERM. Both mean alive.
			name:  "pid 1 (alive, EPERM unless root)",
			setup: metaBytes(fmt.Sprintf(`{"pid":1,"startedAt":%d}`, started)),
			want:  Info{Held: true, PID: 1, StartedAt: time.UnixMilli(started)},
			age:   fresh,
		},
		{
			name: "dead pid",
			setup: func(t *testing.T, dir string) string {
				return metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":%d}`, deadPID(t), started))(t, dir)
			},
		},
		{
			name:  "keys match case-insensitively (encoding/json)",
			setup: metaBytes(fmt.Sprintf(`{"PID":%d,"StartedAt":%d,"LABEL":"L"}`, self, started)),
			want:  Info{Held: true, PID: self, StartedAt: time.UnixMilli(started), Label: "L"},
			age:   fresh,
		},
		{
			name: "mtime past the TTL",
			setup: func(t *testing.T, dir string) string {
				p := metaBytes(selfMeta)(t, dir)
				setMetaMtime(t, p, time.Now().Add(-DefaultTTL-time.Minute))
				return p
			},
		},
		{
			name: "mtime just inside the TTL",
			setup: func(t *testing.T, dir string) string {
				p := metaBytes(selfMeta)(t, dir)
				setMetaMtime(t, p, time.Now().Add(-DefaultTTL+time.Minute))
				return p
			},
			want: heldSelf,
			age:  [2]time.Duration{DefaultTTL - time.Minute, DefaultTTL},
		},
		{
			name:  "TTL counts from mtime, not startedAt",
			setup: metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":1}`, self)),
			want:  Info{Held: true, PID: self, StartedAt: time.UnixMilli(1)},
			age:   fresh,
		},
		{
			name: "custom TTL: past it",
			setup: func(t *testing.T, dir string) string {
				p := metaBytes(selfMeta)(t, dir)
				setMetaMtime(t, p, time.Now().Add(-2*time.Minute))
				return p
			},
			ttl: time.Minute,
		},
		{
			name: "custom TTL: inside it",
			setup: func(t *testing.T, dir string) string {
				p := metaBytes(selfMeta)(t, dir)
				setMetaMtime(t, p, time.Now().Add(-2*time.Minute))
				return p
			},
			ttl:  time.Hour,
			want: heldSelf,
			age:  [2]time.Duration{2 * time.Minute, 3 * time.Minute},
		},
		{
			name: "mtime in the future: held with negative Age",
			setup: func(t *testing.T, dir string) string {
				p := metaBytes(selfMeta)(t, dir)
				setMetaMtime(t, p, time.Now().Add(10*time.Minute))
				return p
			},
			want: heldSelf,
			age:  [2]time.Duration{-10 * time.Minute, -9 * time.Minute},
		},
		{
			name: "offload-lock extra keys: label and host read, others ignored",
			setup: metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":%d,"token":"9f2c","label":"render: step 3","host":"gpu-box",`+
				`"bootId":"0b1c","procStart":1764469999000,"procTicks":123456,"tool":"offload-lock/1.0.0"}`, self, started)),
			want: Info{Held: true, PID: self, StartedAt: time.UnixMilli(started), Label: "render: step 3", Host: "gpu-box"},
			age:  fresh,
		},
		{
			name:  "label with JSON escapes",
			setup: metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":%d,"label":"a\"b\u00e9\n"}`, self, started)),
			want:  Info{Held: true, PID: self, StartedAt: time.UnixMilli(started), Label: "a\"bé\n"},
			age:   fresh,
		},
		{
			name:  "label of the wrong type (number): still held, label empty",
			setup: metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":%d,"label":42,"host":"gpu-box"}`, self, started)),
			want:  Info{Held: true, PID: self, StartedAt: time.UnixMilli(started), Host: "gpu-box"},
			age:   fresh,
		},
		{
			name:  "host of the wrong type (object), label null: still held",
			setup: metaBytes(fmt.Sprintf(`{"pid":%d,"startedAt":%d,"label":null,"host":{"name":"x"}}`, self, started)),
			want:  heldSelf,
			age:   fresh,
		},
		{
			name:  "extras on a null-pid lock",
			setup: metaBytes(`{"label":"L","host":"H"}`),
			want:  Info{Held: true, Label: "L", Host: "H"},
			age:   fresh,
		},
		{
			name: "extras do not rescue a dead pid",
			setup: func(t *testing.T, dir string) string {
				return metaBytes(fmt.Sprintf(`{"pid":%d,"label":"L"}`, deadPID(t)))(t, dir)
			},
		},
		{
			name:  "meta.json of exactly 1 MiB: read",
			setup: func(t *testing.T, dir string) string { return metaBytesB(padTo(t, selfMeta, 1<<20))(t, dir) },
			want:  heldSelf,
			age:   fresh,
		},
		{
			name:  "meta.json over 1 MiB: free",
			setup: func(t *testing.T, dir string) string { return metaBytesB(padTo(t, selfMeta, 1<<20+1))(t, dir) },
		},
	}

	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			lockPath := tc.setup(t, t.TempDir())
			var got Info
			if tc.ttl == 0 {
				got = Inspect(lockPath)
			} else {
				got = InspectTTL(lockPath, tc.ttl)
			}
			if !tc.want.Held {
				// A free lock is exactly the zero Info, Age included.
				if got != (Info{}) {
					t.Fatalf("got %+v, want free (zero Info)", got)
				}
				return
			}
			if got.Age < tc.age[0] || got.Age > tc.age[1] {
				t.Errorf("Age = %v, want within [%v, %v]", got.Age, tc.age[0], tc.age[1])
			}
			got.Age = 0
			if !infoEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// infoEqual compares Infos, StartedAt by instant (time.UnixMilli carries a
// location, so == on time.Time is not the right test).
func infoEqual(a, b Info) bool {
	if !a.StartedAt.Equal(b.StartedAt) || a.StartedAt.IsZero() != b.StartedAt.IsZero() {
		return false
	}
	a.StartedAt, b.StartedAt = time.Time{}, time.Time{}
	return a == b
}

func metaBytes(s string) func(t *testing.T, dir string) string {
	return metaBytesB([]byte(s))
}

func metaBytesB(b []byte) func(t *testing.T, dir string) string {
	return func(t *testing.T, dir string) string {
		return makeLock(t, filepath.Join(dir, DefaultLockName), b)
	}
}

// TestInspectBOMIsAJSONError pins the premise of the BOM row: encoding/json
// itself rejects a leading byte-order mark.
func TestInspectBOMIsAJSONError(t *testing.T) {
	var m coreMeta
	err := json.Unmarshal([]byte("\xEF\xBB\xBF{\"pid\":1}"), &m)
	if err == nil || !strings.Contains(err.Error(), "invalid character") {
		t.Fatalf("json.Unmarshal with BOM: err = %v, want invalid character", err)
	}
}

// TestInspectDoesNotModify checks the read-only promise: inspecting a stale
// lock leaves the directory, meta.json and its mtime as they were.
func TestInspectDoesNotModify(t *testing.T) {
	dir := t.TempDir()
	lockPath := makeLock(t, filepath.Join(dir, DefaultLockName), []byte(fmt.Sprintf(`{"pid":%d,"startedAt":1}`, deadPID(t))))
	old := time.Now().Add(-2 * DefaultTTL).Truncate(time.Second)
	setMetaMtime(t, lockPath, old)
	if got := Inspect(lockPath); got.Held {
		t.Fatalf("dead holder reported held: %+v", got)
	}
	st, err := os.Stat(filepath.Join(lockPath, "meta.json"))
	if err != nil {
		t.Fatalf("meta.json gone after Inspect: %v", err)
	}
	if !st.ModTime().Equal(old) {
		t.Fatalf("meta.json mtime changed: %v, want %v", st.ModTime(), old)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("parent changed: %v %v", entries, err)
	}
}
