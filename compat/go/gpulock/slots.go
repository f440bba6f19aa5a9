package gpulock

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MaxGPUs is the most GPU slots one lock can have, as in offload-lock.
const MaxGPUs = 1024

// SlotPath is the lock path of GPU slot gpu of the lock at lockPath:
// slot 0 (or less) is lockPath itself, so that single-GPU participants
// keep contending on GPU 0; slot k is the sibling "<lockPath>.gpu<k>".
func SlotPath(lockPath string, gpu int) string {
	if gpu <= 0 {
		return lockPath
	}
	return lockPath + ".gpu" + strconv.Itoa(gpu)
}

// SlotCount is how many GPU slots exist next to the lock at lockPath, as
// `offload-lock status` counts them: one past the highest "<name>.gpu<k>"
// beside it (k written without leading zeros, below MaxGPUs), at least 1.
// Read-only; an unreadable parent directory counts as 1.
func SlotCount(lockPath string) int {
	parent, name := filepath.Split(strings.TrimRight(lockPath, "/"))
	if parent == "" {
		parent = "."
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return 1
	}
	n := 1
	prefix := name + ".gpu"
	for _, e := range entries {
		k := strings.TrimPrefix(e.Name(), prefix)
		if k == e.Name() || k == "" || len(k) > 4 || k[0] == '0' || strings.Trim(k, "0123456789") != "" {
			continue
		}
		v, _ := strconv.Atoi(k)
		if v+1 > n {
			n = v + 1
		}
	}
	if n > MaxGPUs {
		n = MaxGPUs
	}
	return n
}

// InspectSlots inspects every slot of the lock at lockPath (SlotCount of
// them) with the TTL of opts (DefaultTTL when zero); element k is slot k.
// Read-only, like Inspect.
func InspectSlots(lockPath string, opts Options) []Info {
	n := SlotCount(lockPath)
	out := make([]Info, n)
	for k := range out {
		out[k] = InspectTTL(SlotPath(lockPath, k), opts.ttl())
	}
	return out
}
