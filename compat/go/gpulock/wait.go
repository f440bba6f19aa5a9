package gpulock

import (
	"context"
	"time"
)

// minPoll is the smallest poll interval WaitFree uses.
const minPoll = time.Millisecond

// WaitFree inspects the lock at lockPath (default TTL) until it is free, wait
// has elapsed, or ctx is done, and returns the FINAL inspection: Held=false
// means the lock is free now; Held=true means it was still held when the wait
// ended (Age and PID say by whom and for how long).
//
// It inspects once at the start and then every poll; poll values below 1 ms
// are raised to 1 ms, and the last sleep is shortened so that WaitFree
// inspects once more when wait runs out. wait <= 0 means inspect once. When
// ctx is done, WaitFree returns promptly with the last inspection (it does
// not inspect again). A nil ctx is treated as context.Background().
//
// WaitFree is read-only: it never creates, reclaims or removes anything, so a
// stale lock reads as free while its directory is still on disk.
func WaitFree(ctx context.Context, lockPath string, wait, poll time.Duration) Info {
	return waitFree(ctx, lockPath, wait, poll, Inspect)
}

// WaitFreeTTL is WaitFree with an explicit TTL for each inspection (see
// InspectTTL). It is read-only, like WaitFree.
func WaitFreeTTL(ctx context.Context, lockPath string, ttl, wait, poll time.Duration) Info {
	return waitFree(ctx, lockPath, wait, poll, func(p string) Info { return InspectTTL(p, ttl) })
}

// waitFree is the polling loop, with the inspection passed in so tests can
// count inspections.
func waitFree(ctx context.Context, lockPath string, wait, poll time.Duration, inspect func(string) Info) Info {
	if ctx == nil {
		ctx = context.Background()
	}
	if poll < minPoll {
		poll = minPoll
	}
	deadline := time.Now().Add(wait)
	for {
		info := inspect(lockPath)
		if !info.Held {
			return info
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return info
		}
		sleep := poll
		if left < sleep {
			sleep = left
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return info
		case <-timer.C:
		}
	}
}
