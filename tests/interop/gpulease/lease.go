package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// busyError is contention: someone else holds the lease (v names them).
type busyError struct{ v view }

func (e *busyError) Error() string {
	if e.v.Reason == "claim in progress" && e.v.PID == 0 {
		return "held: a claim is being written"
	}
	return fmt.Sprintf("held by %s (pid %d, epoch %d, reason %q)", e.v.Class, e.v.PID, e.v.Epoch, e.v.Reason)
}

type lease struct {
	dir      string
	epoch    uint64
	class    string
	done     bool
	borrowed bool // inherited from a parent, which renews and releases it
}

// counterDir is where the fencing counter lives: the lease directory's parent.
func counterDir(dir string) string { return filepath.Dir(dir) }

// withCounterLock runs fn holding <gpu dir>/epoch.lock, made with O_EXCL;
// waits 400 x 5 ms, and removes a lock older than 30 s as debris.
func withCounterLock(gpu string, fn func() error) error {
	lock := filepath.Join(gpu, "epoch.lock")
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			f.Close()
			defer os.Remove(lock)
			return fn()
		}
		if !os.IsExist(err) {
			return err
		}
		if st, serr := os.Stat(lock); serr == nil && time.Since(st.ModTime()) > counterLockStale {
			os.Remove(lock)
			continue
		}
		if attempt >= 400 {
			return fmt.Errorf("%s did not clear", lock)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nextEpoch issues the next fencing epoch: read (missing is 0), add one,
// write epoch.tmp, rename it over epoch; an unparseable counter is an error.
func nextEpoch(gpu string) (uint64, error) {
	var next uint64
	err := withCounterLock(gpu, func() error {
		path := filepath.Join(gpu, "epoch")
		cur := uint64(0)
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			v, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if perr != nil {
				return fmt.Errorf("counter %s unreadable: %q", path, string(b))
			}
			cur = v
		case !os.IsNotExist(err):
			return err
		}
		next = cur + 1
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.FormatUint(next, 10)), 0o666); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	})
	return next, err
}

type takeOptions struct {
	class, reason, origin, jobID string
	window                       time.Duration
}

// tryTake is one acquisition: a cheap look first; then the directory (made
// if missing, never exclusively), the next epoch, and the claim created
// with O_EXCL and written complete in one write. A claim there that does
// not parse and is younger than the grace is being written; a takeable one
// is removed (the claim only) and the next of three attempts made.
func tryTake(dir string, o takeOptions) (*lease, error) {
	for attempt := 0; attempt < 3; attempt++ {
		if v := inspect(dir); v.Held {
			return nil, &busyError{v}
		}
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, err
		}
		epoch, err := nextEpoch(counterDir(dir))
		if err != nil {
			return nil, err
		}
		now := time.Now()
		start, _ := startTicks(os.Getpid())
		rec, _ := json.Marshal(&claim{Epoch: epoch, Class: o.class, Holder: holder{os.Getpid(), start},
			JobID: o.jobID, Origin: o.origin, Reason: o.reason, AcquiredAt: now.UnixMilli(),
			ExpiresAt: now.Add(o.window).UnixMilli(), RenewedAt: now.UnixMilli()})
		path := filepath.Join(dir, claimFile)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			_, werr := f.Write(rec)
			cerr := f.Close()
			if werr != nil || cerr != nil {
				os.Remove(path)
				return nil, fmt.Errorf("writing the claim: %v %v", werr, cerr)
			}
			return &lease{dir: dir, epoch: epoch, class: o.class}, nil
		}
		if !os.IsExist(err) {
			return nil, err
		}
		c, rerr := readClaim(dir)
		if rerr != nil {
			if st, serr := os.Stat(path); serr == nil && time.Since(st.ModTime()) < claimGrace {
				return nil, &busyError{view{Held: true, Reason: "claim in progress"}}
			}
		}
		if !takeable(dir, c, time.Now()) {
			return nil, &busyError{inspect(dir)}
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return nil, &busyError{inspect(dir)}
}

// take waits up to `wait` for the lease, looking again every `poll`.
func take(dir string, o takeOptions, wait, poll time.Duration, onBusy func(error)) (*lease, error) {
	deadline := time.Now().Add(wait)
	for {
		l, err := tryTake(dir, o)
		var busy *busyError
		if err == nil || !errors.As(err, &busy) {
			return l, err
		}
		if onBusy != nil {
			onBusy(err)
			onBusy = nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		if left > poll {
			left = poll
		}
		time.Sleep(left)
	}
}

// check is the fence: the claim there still carries our epoch.
func (l *lease) check() error {
	if l.done {
		return errors.New("released")
	}
	c, err := readClaim(l.dir)
	if err != nil {
		return fmt.Errorf("lease gone (epoch %d)", l.epoch)
	}
	if c.Epoch != l.epoch {
		return fmt.Errorf("fenced out: ours %d, current %d", l.epoch, c.Epoch)
	}
	return nil
}

func (l *lease) renew() error {
	if err := l.check(); err != nil {
		return err
	}
	if l.borrowed {
		return nil
	}
	return os.WriteFile(filepath.Join(l.dir, "hb."+strconv.FormatUint(l.epoch, 10)),
		[]byte(strconv.FormatInt(time.Now().UnixMilli(), 10)), 0o666)
}

// release removes every hb.* and unloaded.* marker and then the claim, if
// the claim is still ours; nothing otherwise. Reports whether it was.
func (l *lease) release() (bool, error) {
	if l.done || l.borrowed {
		return false, nil
	}
	l.done = true
	c, err := readClaim(l.dir)
	if err != nil || c.Epoch != l.epoch {
		return false, nil
	}
	if names, err := os.ReadDir(l.dir); err == nil {
		for _, e := range names {
			if strings.HasPrefix(e.Name(), "unloaded.") || strings.HasPrefix(e.Name(), "hb.") {
				os.Remove(filepath.Join(l.dir, e.Name()))
			}
		}
	}
	if err := os.Remove(filepath.Join(l.dir, claimFile)); err != nil && !os.IsNotExist(err) {
		return false, err
	}
	return true, nil
}

// inherited reads GPU_LEASE_DIR, GPU_LEASE_EPOCH and GPU_LEASE_CLASS: all
// three or none, a positive epoch, a known class, and still current.
func inherited() (*lease, error) {
	dir := strings.TrimSpace(os.Getenv("GPU_LEASE_DIR"))
	raw := strings.TrimSpace(os.Getenv("GPU_LEASE_EPOCH"))
	class := strings.TrimSpace(os.Getenv("GPU_LEASE_CLASS"))
	if dir == "" && raw == "" && class == "" {
		return nil, nil
	}
	if dir == "" || raw == "" || class == "" {
		return nil, errors.New("inherited lease incomplete")
	}
	epoch, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || epoch == 0 {
		return nil, fmt.Errorf("inherited epoch %q invalid", raw)
	}
	if class != "media" && class != "text" {
		return nil, fmt.Errorf("inherited class %q invalid", class)
	}
	if v := inspect(dir); !v.Held || v.Epoch != epoch {
		return nil, fmt.Errorf("inherited lease (epoch %d) no longer current at %s", epoch, dir)
	}
	return &lease{dir: dir, epoch: epoch, class: class, borrowed: true}, nil
}
