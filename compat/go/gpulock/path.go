package gpulock

import (
	"os"
	"path/filepath"
)

// DefaultLockName is the base name of the shared lock directory under the OS
// temporary directory, the same name the Node runners use.
const DefaultLockName = "local-offload-gpu.lock"

// Path returns the lock directory path to inspect. It only computes a name; it
// never creates or touches anything.
//
// First match wins:
//  1. override, if non-empty (used as-is);
//  2. the GPU_LOCK environment variable, if non-empty (used as-is, not cleaned);
//  3. filepath.Join(os.TempDir(), DefaultLockName).
//
// os.TempDir is TMPDIR if non-empty, else /tmp. Unlike the Node runners, Go
// does NOT consult TMP or TEMP: with TMPDIR unset and TMP set, Node resolves
// $TMP/local-offload-gpu.lock while Path resolves /tmp/local-offload-gpu.lock.
// This is the documented behaviour of the original reader and is kept as is;
// set GPU_LOCK on both sides to make them agree.
func Path(override string) string {
	if override != "" {
		return override
	}
	if p := os.Getenv("GPU_LOCK"); p != "" {
		return p
	}
	return filepath.Join(os.TempDir(), DefaultLockName)
}
