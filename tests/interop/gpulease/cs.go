package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The critical-section protocol of the contention suite (tests/interop/
// cs.mjs describes it; participant.cpp and participant.mjs speak it too):
// <dir>/in-cs names who is inside, made with link(2) of a private file so it
// is exclusive and never seen empty; a live writer found inside is an
// overlap (event O), then the entrant takes the sentinel over.

func emit(typ string, fields ...string) {
	ms := float64(time.Now().UnixNano()) / 1e6
	line := fmt.Sprintf("%s %.3f %s\n", typ, ms, strings.Join(fields, " "))
	os.Stdout.WriteString(line) // one write per line
}

type procState struct {
	state byte
	flags uint64
	start string
}

func readProcState(pid int) (procState, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procState{}, false
	}
	s := string(b)
	i := strings.LastIndex(s, ")")
	if i < 0 || i+2 >= len(s) {
		return procState{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 {
		return procState{}, false
	}
	flags, _ := strconv.ParseUint(f[6], 10, 64)
	return procState{state: f[0][0], flags: flags, start: f[19]}, true
}

// writerDead: gone, reused (another start), a zombie, or exiting.
func writerDead(pid int, start string) bool {
	const pfExiting = 0x4
	p, ok := readProcState(pid)
	if !ok || p.start != start {
		return true
	}
	if p.state == 'Z' || p.state == 'X' || p.state == 'x' {
		return true
	}
	return p.flags&pfExiting != 0
}

type sentinel struct {
	dir, tag, kind, flag, mine string
}

func newSentinel(dir, tag, kind string, locked bool) *sentinel {
	flag := "N"
	if locked {
		flag = "L"
	}
	p, _ := readProcState(os.Getpid())
	return &sentinel{dir: dir, tag: tag, kind: kind, flag: flag,
		mine: fmt.Sprintf("%s %d %s %s\n", tag, os.Getpid(), p.start, flag)}
}

func (s *sentinel) path() string { return filepath.Join(s.dir, "in-cs") }

func (s *sentinel) enter() {
	tmp := filepath.Join(s.dir, "in-cs.tmp."+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(tmp, []byte(s.mine), 0o644); err != nil {
		emit("E", s.tag, "cannot-write-"+tmp)
		return
	}
	defer os.Remove(tmp)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Link(tmp, s.path())
		if err == nil {
			return
		}
		if !os.IsExist(err) {
			emit("E", s.tag, "link-in-cs:"+err.Error())
			return
		}
		other, rerr := os.ReadFile(s.path())
		if rerr != nil {
			continue
		}
		f := strings.Fields(string(other))
		for len(f) < 4 {
			f = append(f, "?")
		}
		pid, _ := strconv.Atoi(f[1])
		if pid > 0 && writerDead(pid, f[2]) {
			emit("D", s.tag, f[0], f[1])
			for {
				now, _ := os.ReadFile(s.path())
				if string(now) != string(other) {
					break
				}
				if time.Now().After(deadline) {
					emit("E", s.tag, "dead-sentinel-not-cleared", f[0])
					os.Remove(s.path())
					break
				}
				time.Sleep(time.Millisecond)
			}
			continue
		}
		emit("O", s.tag, s.kind, f[0], f[1], s.flag, f[3])
		if err := os.Rename(tmp, s.path()); err != nil {
			emit("E", s.tag, "rename-in-cs:"+err.Error())
		}
		return
	}
}

func (s *sentinel) leave() {
	now, err := os.ReadFile(s.path())
	if err != nil {
		emit("G", s.tag, "missing")
		return
	}
	if string(now) != s.mine {
		emit("G", s.tag, "replaced-by", strings.Fields(string(now) + " ?")[0])
		return
	}
	os.Remove(s.path())
}
