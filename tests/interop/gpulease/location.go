package main

import (
	"os"
	"path/filepath"
	"strings"
)

// leaseDir places the lease as gpulease does: an explicit directory, else
// GPU_LOCK (the lease directory itself), else <state root>/gpu/lease with
// the state root from -state-dir, LOCAL_OFFLOAD_STATE_DIR, or
// /var/lib/local-offload. Values are trimmed and made absolute.
func leaseDir(explicit, stateDir string) (string, error) {
	if v := strings.TrimSpace(explicit); v != "" {
		return filepath.Abs(v)
	}
	if v := strings.TrimSpace(os.Getenv("GPU_LOCK")); v != "" {
		return filepath.Abs(v)
	}
	root := strings.TrimSpace(stateDir)
	if root == "" {
		root = strings.TrimSpace(os.Getenv("LOCAL_OFFLOAD_STATE_DIR"))
	}
	if root == "" {
		root = "/var/lib/local-offload"
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	return filepath.Join(abs, "gpu", "lease"), nil
}
