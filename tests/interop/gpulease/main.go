// Command gpulease-standin is a gpulease participant for offload-lock's
// tests: it takes, renews, releases and takes over the machine-wide GPU
// lease by gpulease's rules (doc/protocol-gpulease.md), so that the tests
// need nothing from outside the repository. Standard library only.
//
//	gpulease-standin hold    [lease flags] [-wait D] [-for D]   take, hold, release
//	gpulease-standin exec    [lease flags] [-wait D] -- CMD...  take, run CMD under the lease, release
//	gpulease-standin loop    [lease flags] -cs-dir D -tag T     contention loop (cs.go)
//	gpulease-standin inspect [-dir D]                            a reader's view, one JSON line
//	gpulease-standin parse   FILE...                             each claim as gpulease decodes it, one JSON line each
//
// Lease flags: -dir (else GPU_LOCK, else -state-dir or LOCAL_OFFLOAD_STATE_DIR
// or /var/lib/local-offload, then /gpu/lease), -class media|text, -window
// (the declared window, default 1h), -reason, -origin, -job, -poll (the
// waiters' poll, default 1s), -renew (default 15s).
//
// hold prints one line per event: "waiting PID", "busy WHY" (once), then
// "acquired PID EPOCH" (or "inherited EPOCH" under GPU_LEASE_* from a
// parent), "renewed EPOCH", and at the end "released EPOCH", "lost WHY" or
// "timeout WHY"; "error MSG" on a failure. It holds until -for passes or,
// without -for, until stdin reaches EOF. Exit: 0 released, 1 timed out,
// 2 usage, 4 error, 5 lost.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

const (
	exitOK      = 0
	exitTimeout = 1
	exitUsage   = 2
	exitError   = 4
	exitLost    = 5
)

type common struct {
	dir, stateDir, class, reason, origin, job *string
	window, poll, renew, wait                 *time.Duration
}

func leaseFlags(fs *flag.FlagSet) common {
	return common{
		dir:      fs.String("dir", "", "the lease directory"),
		stateDir: fs.String("state-dir", "", "the state root (lease at <root>/gpu/lease)"),
		class:    fs.String("class", "media", "media or text"),
		reason:   fs.String("reason", "", "why the card is held"),
		origin:   fs.String("origin", "", "who asked"),
		job:      fs.String("job", "", "job id"),
		window:   fs.Duration("window", time.Hour, "the declared window"),
		poll:     fs.Duration("poll", time.Second, "how often a waiter looks again"),
		renew:    fs.Duration("renew", 15*time.Second, "how often the holder renews"),
		wait:     fs.Duration("wait", 0, "how long to wait for the lease (0: try once)"),
	}
}

func (c common) resolve() (string, takeOptions, error) {
	dir, err := leaseDir(*c.dir, *c.stateDir)
	if *c.class != "media" && *c.class != "text" {
		err = fmt.Errorf("unknown class %q", *c.class)
	}
	return dir, takeOptions{class: *c.class, reason: *c.reason, origin: *c.origin, jobID: *c.job, window: *c.window}, err
}

func say(format string, a ...interface{}) { os.Stdout.WriteString(fmt.Sprintf(format, a...) + "\n") }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gpulease-standin hold|exec|loop|inspect|parse ...")
		os.Exit(exitUsage)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ContinueOnError)
	var code int
	switch os.Args[1] {
	case "hold":
		code = modeHold(fs, os.Args[2:])
	case "exec":
		code = modeExec(fs, os.Args[2:])
	case "loop":
		code = modeLoop(fs, os.Args[2:])
	case "inspect":
		dir := fs.String("dir", "", "the lease directory")
		stateDir := fs.String("state-dir", "", "the state root")
		if fs.Parse(os.Args[2:]) != nil {
			os.Exit(exitUsage)
		}
		d, err := leaseDir(*dir, *stateDir)
		if err != nil {
			say("error %v", err)
			os.Exit(exitError)
		}
		v := inspect(d)
		b, _ := json.Marshal(v)
		say("%s", b)
		if !v.Held {
			code = 1
		}
	case "parse":
		code = modeParse(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "gpulease-standin: unknown mode %q\n", os.Args[1])
		code = exitUsage
	}
	os.Exit(code)
}

// acquire takes the lease, or the one inherited from a parent.
func acquire(c common) (*lease, int) {
	dir, o, err := c.resolve()
	if err != nil {
		say("error %v", err)
		return nil, exitError
	}
	say("waiting %d", os.Getpid())
	if l, ierr := inherited(); ierr != nil || l != nil {
		if ierr != nil {
			say("error %v", ierr)
			return nil, exitError
		}
		say("inherited %d", l.epoch)
		return l, exitOK
	}
	l, err := take(dir, o, *c.wait, *c.poll, func(e error) { say("busy %v", e) })
	if err != nil {
		if _, busy := err.(*busyError); busy {
			say("timeout %v", err)
			return nil, exitTimeout
		}
		say("error %v", err)
		return nil, exitError
	}
	say("acquired %d %d", os.Getpid(), l.epoch)
	return l, exitOK
}

// holdUntil renews every -renew until done fires; false when the lease was lost.
func holdUntil(l *lease, c common, done <-chan struct{}) bool {
	tick := time.NewTicker(*c.renew)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return true
		case <-tick.C:
			if err := l.renew(); err != nil {
				say("lost %v", err)
				return false
			}
			say("renewed %d", l.epoch)
		}
	}
}

func finish(l *lease) int {
	if l.borrowed {
		say("done %d", l.epoch)
		return exitOK
	}
	ours, err := l.release()
	if err != nil {
		say("error %v", err)
		return exitError
	}
	if !ours {
		say("lost not ours at release")
		return exitLost
	}
	say("released %d", l.epoch)
	return exitOK
}

func modeHold(fs *flag.FlagSet, args []string) int {
	c := leaseFlags(fs)
	hold := fs.Duration("for", 0, "hold this long (0: until stdin reaches EOF)")
	if fs.Parse(args) != nil || fs.NArg() != 0 {
		return exitUsage
	}
	l, code := acquire(c)
	if l == nil {
		return code
	}
	done := make(chan struct{})
	go func() {
		if *hold > 0 {
			time.Sleep(*hold)
		} else {
			io.Copy(io.Discard, os.Stdin)
		}
		close(done)
	}()
	if !holdUntil(l, c, done) {
		return exitLost
	}
	return finish(l)
}

// modeExec runs a command under the lease, passing it down the way gpulease
// passes a lease to its children.
func modeExec(fs *flag.FlagSet, args []string) int {
	c := leaseFlags(fs)
	if fs.Parse(args) != nil || fs.NArg() == 0 {
		return exitUsage
	}
	l, code := acquire(c)
	if l == nil {
		return code
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "GPU_LEASE_DIR="+l.dir, "GPU_LEASE_EPOCH="+strconv.FormatUint(l.epoch, 10),
		"GPU_LEASE_CLASS="+l.class)
	if err := cmd.Start(); err != nil {
		say("error %v", err)
		finish(l)
		return exitError
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	if !holdUntil(l, c, done) {
		cmd.Process.Kill()
		<-done
		return exitLost
	}
	code = finish(l)
	if ee, ok := waitErr.(*exec.ExitError); ok && code == exitOK {
		say("exit %d", ee.ExitCode())
	}
	return code
}

func modeParse(args []string) int {
	if len(args) == 0 {
		return exitUsage
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	for _, name := range args {
		b, err := os.ReadFile(name)
		if err != nil {
			say("error %v", err)
			return exitError
		}
		c, perr := parseClaim(b)
		out := map[string]interface{}{"ok": perr == nil}
		if perr == nil {
			out["epoch"] = strconv.FormatUint(c.Epoch, 10)
			out["class"] = c.Class
			out["pid"] = c.Holder.PID
			out["start"] = c.Holder.Start
			out["jobId"], out["origin"], out["reason"] = c.JobID, c.Origin, c.Reason
			out["acquiredAt"], out["expiresAt"], out["renewedAt"] = c.AcquiredAt, c.ExpiresAt, c.RenewedAt
		}
		enc.Encode(out)
	}
	return exitOK
}

// modeLoop is a contention-suite participant: take (waiting up to -wait,
// polling every -poll), critical section, release, until <cs-dir>/stop.
func modeLoop(fs *flag.FlagSet, args []string) int {
	c := leaseFlags(fs)
	csDir := fs.String("cs-dir", "", "the critical-section directory")
	tag := fs.String("tag", "", "this participant's tag")
	kind := fs.String("kind", "gpulease", "kind named in events")
	csMin := fs.Int("cs-min", 1, "ms inside, at least")
	csMax := fs.Int("cs-max", 4, "ms inside, at most")
	thinkMin := fs.Int("think-min", 0, "ms between cycles, at least")
	thinkMax := fs.Int("think-max", 5, "ms between cycles, at most")
	skipEvery := fs.Int("skip-lock-every", 0, "detector self-test: every Nth cycle skips the lease")
	if fs.Parse(args) != nil || *csDir == "" || *tag == "" {
		return exitUsage
	}
	if *c.wait == 0 {
		*c.wait = 3 * time.Second
	}
	dir, o, err := c.resolve()
	if err != nil {
		say("error %v", err)
		return exitError
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano() ^ int64(os.Getpid())))
	between := func(lo, hi int) time.Duration {
		if hi <= lo {
			return time.Duration(lo) * time.Millisecond
		}
		return time.Duration(lo)*time.Millisecond + time.Duration(rng.Int63n(int64(hi-lo)*1000))*time.Microsecond
	}
	stop := func() bool { _, err := os.Lstat(filepath.Join(*csDir, "stop")); return err == nil }
	for cycle := 1; !stop(); cycle++ {
		time.Sleep(between(*thinkMin, *thinkMax))
		if stop() {
			break
		}
		locked := !(*skipEvery > 0 && cycle%*skipEvery == 0)
		var l *lease
		if locked {
			l, err = take(dir, o, *c.wait, *c.poll, nil)
			if err != nil {
				if _, busy := err.(*busyError); busy {
					emit("T", *tag)
				} else {
					emit("E", *tag, "take:"+err.Error())
				}
				continue
			}
		}
		s := newSentinel(*csDir, *tag, *kind, locked)
		s.enter()
		if locked {
			p, _ := readProcState(os.Getpid())
			emit("A", *tag, *kind, strconv.Itoa(os.Getpid()), p.start, "e"+strconv.FormatUint(l.epoch, 10))
		} else {
			emit("N", *tag, *kind)
		}
		time.Sleep(between(*csMin, *csMax))
		s.leave()
		emit("X", *tag)
		if locked {
			if ours, err := l.release(); err != nil {
				emit("E", *tag, "release:"+err.Error())
			} else if !ours {
				emit("L", *tag, "gpulease release")
			}
			emit("F", *tag)
		}
	}
	return exitOK
}
