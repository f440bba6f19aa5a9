// Command gpulock-inspect prints one JSON line describing the shared GPU lock
// and exits 0 if the GPU is busy, 1 if it is free, 2 on a usage error: busy
// when the lock is held, or where the upstream's current runners keep a
// gpulease lease that offload-lock's acquisitions also take, while that
// lease is held (gpulock.InspectGPU). It is read-only: it never creates,
// reclaims or removes the lock or the lease.
//
// Usage:
//
//	gpulock-inspect [-ttl DURATION] [-wait DURATION [-poll DURATION] [-within DURATION]] [PATH]
//
// A DURATION is written as the offload-lock command writes one
// (gpulock.ParseDuration): 90s, 1h30m, 1d, 1.5, forever.
// PATH defaults to gpulock.Path("") (GPU_LOCK, else $TMPDIR or /tmp, joined
// with local-offload-gpu.lock). With -wait, it waits up to that long for the
// GPU to become free, polling every -poll; SIGINT or SIGTERM ends the wait
// early and the last inspection is printed; -within answers at once when
// the holder declared it will stay longer than that. Output:
//
//	{"path":"...","held":true,"pid":1234,"ageMs":5000,"label":"...","startedAt":1764470000000,"host":"...","busy":true,"busyBy":"lock"}
//
// held, pid, ageMs, label, startedAt and host are the lock's: startedAt is
// epoch milliseconds, 0 when unknown; on a free lock every one of them but
// path is zero. busy is whether the GPU is taken, busyBy by what: "lock",
// "gpulease" (the lock is free, a gpulease holder has the lease), or "".
// -h is treated as a usage error (exit 2), so that exit 0 always means
// "busy".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"offload-lock/compat/go/gpulock"
)

// Exit codes, one per outcome; exitHeld is the GPU being busy.
const (
	exitHeld  = 0
	exitFree  = 1
	exitUsage = 2
)

const usageLine = "usage: gpulock-inspect [-ttl DURATION] [-wait DURATION [-poll DURATION] [-within DURATION]] [PATH]"

// durationFlag is a flag read by the offload-lock command's grammar.
type durationFlag struct{ d time.Duration }

func (f *durationFlag) String() string { return gpulock.DescribeDuration(f.d) }
func (f *durationFlag) Set(s string) error {
	d, err := gpulock.ParseDuration(s)
	if err != nil {
		return err
	}
	f.d = d
	return nil
}

func durationVar(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	f := &durationFlag{value}
	fs.Var(f, name, usage)
	return &f.d
}

// report is the output line; field order is the documented key order.
type report struct {
	Path      string `json:"path"`
	Held      bool   `json:"held"`
	PID       int    `json:"pid"`
	AgeMs     int64  `json:"ageMs"`
	Label     string `json:"label"`
	StartedAt int64  `json:"startedAt"`
	Host      string `json:"host"`
	Busy      bool   `json:"busy"`
	BusyBy    string `json:"busyBy"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpulock-inspect", flag.ContinueOnError)
	// The flag package's own messages span several lines; print one instead.
	fs.SetOutput(io.Discard)
	ttl := durationVar(fs, "ttl", gpulock.DefaultTTL, "staleness TTL, measured from the meta.json mtime")
	wait := durationVar(fs, "wait", 0, "wait up to this long for the lock to become free")
	poll := durationVar(fs, "poll", 250*time.Millisecond, "poll interval while waiting (at least 1ms)")
	within := durationVar(fs, "within", 0, "with -wait: answer at once when the holder will stay longer than this")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, usageLine)
		} else {
			fmt.Fprintf(stderr, "gpulock-inspect: %v; %s\n", err, usageLine)
		}
		return exitUsage
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "gpulock-inspect: too many arguments; %s\n", usageLine)
		return exitUsage
	}
	if *ttl <= 0 {
		fmt.Fprintf(stderr, "gpulock-inspect: -ttl must be positive; %s\n", usageLine)
		return exitUsage
	}
	waitSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "wait" {
			waitSet = true
		}
	})

	path := gpulock.Path(fs.Arg(0))

	opts := gpulock.Options{TTL: *ttl, Wait: *wait, Poll: *poll, Within: *within}
	var g gpulock.GPU
	if waitSet {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		g = gpulock.WaitGPUFree(ctx, path, opts)
		stop()
	} else {
		g = gpulock.InspectGPU(path, opts)
	}
	info := g.Lock

	out := report{
		Path:  path,
		Held:  info.Held,
		PID:   info.PID,
		AgeMs: info.Age.Milliseconds(),
		Label: info.Label,
		Host:  info.Host,
	}
	if !info.StartedAt.IsZero() {
		out.StartedAt = info.StartedAt.UnixMilli()
	}
	if out.Busy = g.Busy(); info.Held {
		out.BusyBy = "lock"
	} else if out.Busy {
		out.BusyBy = "gpulease"
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false) // print labels like "a<b" verbatim
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(stderr, "gpulock-inspect: writing output: %v\n", err)
	}
	if g.Busy() {
		return exitHeld
	}
	return exitFree
}
