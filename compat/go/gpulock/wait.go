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

// WaitFreeWithin is WaitFree for a caller that can only use the lock if it
// frees within budget (a gate that defers its work otherwise): it waits up
// to budget, like WaitFree, but returns at once, without waiting, when an
// inspection finds the lock held by a holder that declared how long it would
// keep it (Info.ExpectedFree is not zero) and expects to free it later than
// budget from the call (the moment WaitFree's wait would end). So a holder
// with 20 minutes to go answers a 90 s budget in milliseconds. A holder that
// declared nothing is waited for as before, up to budget; so is one that
// expects to be done in time (or is overdue) but is not yet.
//
// The returned Info is the final inspection, as WaitFree's: Held=false means
// free now. Poll, ctx and a nil ctx behave as in WaitFree. Read-only.
func WaitFreeWithin(ctx context.Context, lockPath string, budget, poll time.Duration) Info {
	return waitFreeWithin(ctx, lockPath, DefaultTTL, budget, poll)
}

// WaitFreeWithinTTL is WaitFreeWithin with an explicit TTL for each
// inspection (see InspectTTL). It is read-only, like WaitFree.
func WaitFreeWithinTTL(ctx context.Context, lockPath string, ttl, budget, poll time.Duration) Info {
	return waitFreeWithin(ctx, lockPath, ttl, budget, poll)
}

func waitFreeWithin(ctx context.Context, lockPath string, ttl, budget, poll time.Duration) Info {
	deadline := time.Now().Add(budget)
	return waitFreeUntil(ctx, lockPath, budget, poll, func(p string) Info { return InspectTTL(p, ttl) },
		func(info Info) bool { return !info.ExpectedFree.IsZero() && info.ExpectedFree.After(deadline) })
}

// waitFree is the polling loop, with the inspection passed in so tests can
// count inspections.
func waitFree(ctx context.Context, lockPath string, wait, poll time.Duration, inspect func(string) Info) Info {
	return waitFreeUntil(ctx, lockPath, wait, poll, inspect, nil)
}

// waitFreeUntil is waitFree that also ends, returning that inspection, when
// hopeless (if not nil) says of a held lock that waiting is pointless.
func waitFreeUntil(ctx context.Context, lockPath string, wait, poll time.Duration, inspect func(string) Info,
	hopeless func(Info) bool) Info {
	if ctx == nil {
		ctx = context.Background()
	}
	if poll < minPoll {
		poll = minPoll
	}
	deadline := time.Now().Add(wait)
	for {
		info := inspect(lockPath)
		if !info.Held || (hopeless != nil && hopeless(info)) {
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
