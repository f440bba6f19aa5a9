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

// Options says how WaitUntilFree (and InspectSlots) look at the lock. The
// zero value is valid: the default TTL, no wait (inspect once), a 1 ms poll.
type Options struct {
	// TTL judges each inspection (see InspectTTL); 0 means DefaultTTL.
	TTL time.Duration
	// Wait is how long to wait for the lock to become free; 0 or less
	// inspects once, Forever never gives up by itself.
	Wait time.Duration
	// Poll is the time between inspections, raised to 1 ms when smaller.
	Poll time.Duration
	// Within, when positive, is the caller's budget (a gate that defers its
	// work when the GPU will not be free in time): the wait ends at once,
	// returning the held Info, as soon as an inspection finds a holder that
	// declared how long it would keep the lock and expects to free it later
	// than Within from the call. A holder that declared nothing, or is due
	// (or overdue) within the budget, is waited for, up to Wait.
	Within time.Duration
}

func (o Options) ttl() time.Duration {
	if o.TTL <= 0 {
		return DefaultTTL
	}
	return o.TTL
}

// WaitUntilFree inspects the lock at lockPath until it is free, opts.Wait
// has elapsed, ctx is done, or (with opts.Within) the holder will not be
// done within the budget, and returns the FINAL inspection: Held=false
// means the lock is free now. It is WaitFree with every option in one
// place; the same rules apply (a nil ctx is context.Background(); the last
// sleep is shortened so that the lock is inspected once more as the wait
// runs out; a done ctx returns the last inspection at once). Read-only.
func WaitUntilFree(ctx context.Context, lockPath string, opts Options) Info {
	return waitWith(ctx, lockPath, opts.ttl(), opts)
}

// waitWith is WaitUntilFree with the TTL as given (the deprecated wrappers
// pass theirs on unchanged, as they always have).
func waitWith(ctx context.Context, lockPath string, ttl time.Duration, opts Options) Info {
	inspect := func(p string) Info { return InspectTTL(p, ttl) }
	wait := opts.Wait
	var hopeless func(Info) bool
	if opts.Within > 0 {
		deadline := time.Now().Add(opts.Within)
		hopeless = func(info Info) bool { return !info.ExpectedFree.IsZero() && info.ExpectedFree.After(deadline) }
	}
	return waitFreeUntil(ctx, lockPath, wait, opts.Poll, inspect, hopeless)
}

// WaitFreeTTL is WaitFree with an explicit TTL for each inspection.
//
// Deprecated: use WaitUntilFree(ctx, lockPath, Options{TTL: ttl, Wait: wait, Poll: poll}).
func WaitFreeTTL(ctx context.Context, lockPath string, ttl, wait, poll time.Duration) Info {
	return waitWith(ctx, lockPath, ttl, Options{Wait: wait, Poll: poll})
}

// WaitFreeWithin waits up to budget, like WaitFree, but returns at once
// when the holder declared it will keep the lock longer than budget.
//
// Deprecated: use WaitUntilFree(ctx, lockPath, Options{Wait: budget, Within: budget, Poll: poll}).
func WaitFreeWithin(ctx context.Context, lockPath string, budget, poll time.Duration) Info {
	return waitWith(ctx, lockPath, DefaultTTL, Options{Wait: budget, Within: budget, Poll: poll})
}

// WaitFreeWithinTTL is WaitFreeWithin with an explicit TTL.
//
// Deprecated: use WaitUntilFree(ctx, lockPath, Options{TTL: ttl, Wait: budget, Within: budget, Poll: poll}).
func WaitFreeWithinTTL(ctx context.Context, lockPath string, ttl, budget, poll time.Duration) Info {
	return waitWith(ctx, lockPath, ttl, Options{Wait: budget, Within: budget, Poll: poll})
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
	return pollUntil(ctx, wait, poll, func() Info { return inspect(lockPath) }, func(info Info) bool {
		return !info.Held || (hopeless != nil && hopeless(info))
	})
}

// pollUntil looks at once and then every poll (at least minPoll) until done
// says yes of a look, wait has elapsed, or ctx is done, and returns the last
// look. The last sleep is shortened so that it looks once more as the wait
// runs out; a done ctx returns the last look at once (a nil ctx is
// context.Background()). The one polling loop of the waits here.
func pollUntil[T any](ctx context.Context, wait, poll time.Duration, look func() T, done func(T) bool) T {
	if ctx == nil {
		ctx = context.Background()
	}
	if poll < minPoll {
		poll = minPoll
	}
	deadline := time.Now().Add(wait)
	for {
		v := look()
		if done(v) {
			return v
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return v
		}
		sleep := poll
		if left < sleep {
			sleep = left
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return v
		case <-timer.C:
		}
	}
}
