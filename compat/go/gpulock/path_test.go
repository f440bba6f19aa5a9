package gpulock

import (
	"os"
	"testing"
)

func TestPath(t *testing.T) {
	const unset = "\x00unset" // marker: variable not in the environment
	tests := []struct {
		name     string
		override string
		env      map[string]string // GPU_LOCK, TMPDIR, TMP, TEMP; missing keys are unset
		want     string
	}{
		{name: "nothing set", want: "/tmp/local-offload-gpu.lock"},
		{
			name:     "override wins over GPU_LOCK and TMPDIR",
			override: "/explicit/x.lock",
			env:      map[string]string{"GPU_LOCK": "/env/y.lock", "TMPDIR": "/t"},
			want:     "/explicit/x.lock",
		},
		{
			name:     "override used as-is",
			override: "rel/../x.lock/",
			want:     "rel/../x.lock/",
		},
		{
			name: "GPU_LOCK wins over TMPDIR",
			env:  map[string]string{"GPU_LOCK": "/env/y.lock", "TMPDIR": "/t"},
			want: "/env/y.lock",
		},
		{
			name: "GPU_LOCK used as-is, not cleaned",
			env:  map[string]string{"GPU_LOCK": "rel//../y.lock/"},
			want: "rel//../y.lock/",
		},
		{
			name: "empty GPU_LOCK falls through to TMPDIR",
			env:  map[string]string{"GPU_LOCK": "", "TMPDIR": "/t"},
			want: "/t/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR",
			env:  map[string]string{"TMPDIR": "/custom/tmp"},
			want: "/custom/tmp/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR trailing slash cleaned by Join",
			env:  map[string]string{"TMPDIR": "/custom/tmp/"},
			want: "/custom/tmp/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR with dot-dot cleaned by Join",
			env:  map[string]string{"TMPDIR": "/a/b/../c//"},
			want: "/a/c/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR is root",
			env:  map[string]string{"TMPDIR": "/"},
			want: "/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR relative stays relative",
			env:  map[string]string{"TMPDIR": "rel"},
			want: "rel/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR empty means /tmp",
			env:  map[string]string{"TMPDIR": ""},
			want: "/tmp/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR wins over TMP and TEMP",
			env:  map[string]string{"TMPDIR": "/t", "TMP": "/other", "TEMP": "/third"},
			want: "/t/local-offload-gpu.lock",
		},
		{
			// D7: Node would resolve /other/local-offload-gpu.lock here.
			name: "TMP only: Go ignores TMP",
			env:  map[string]string{"TMP": "/other"},
			want: "/tmp/local-offload-gpu.lock",
		},
		{
			name: "TEMP only: Go ignores TEMP",
			env:  map[string]string{"TEMP": "/third"},
			want: "/tmp/local-offload-gpu.lock",
		},
		{
			name: "TMPDIR empty, TMP and TEMP set: Go ignores both",
			env:  map[string]string{"TMPDIR": "", "TMP": "/other", "TEMP": "/third"},
			want: "/tmp/local-offload-gpu.lock",
		},
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"GPU_LOCK", "TMPDIR", "TMP", "TEMP"} {
				v, ok := tc.env[k]
				if !ok {
					v = unset
				}
				// t.Setenv restores the original value after the test,
				// also when we then unset the variable.
				if v == unset {
					t.Setenv(k, "")
					if err := os.Unsetenv(k); err != nil {
						t.Fatal(err)
					}
				} else {
					t.Setenv(k, v)
				}
			}
			if got := Path(tc.override); got != tc.want {
				t.Fatalf("Path(%q) = %q, want %q", tc.override, got, tc.want)
			}
		})
	}
}
