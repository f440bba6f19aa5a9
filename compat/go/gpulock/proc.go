package gpulock

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// readProcStat returns the state letter (field 3) and the start time in clock
// ticks since boot (field 22) from /proc/<pid>/stat. The command name (field
// 2) is in parentheses and may itself hold spaces and ')', so the fields are
// counted from after the last ')'. ok is false when the file cannot be read
// or parsed.
func readProcStat(pid int) (state byte, startTicks uint64, ok bool) {
	data, err := readCapped("/proc/"+strconv.Itoa(pid)+"/stat", 4096)
	if err != nil {
		return 0, 0, false
	}
	paren := bytes.LastIndexByte(data, ')')
	if paren < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(data[paren+1:]))
	// fields[0] is field 3 (state), fields[19] is field 22 (starttime).
	if len(fields) < 20 {
		return 0, 0, false
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], ticks, true
}

// processUID returns the owner of /proc/<pid> (the process's effective uid;
// root for one that is not dumpable). ok is false when it cannot be read,
// or when /proc is not of this process's pid namespace (its pids would name
// other processes).
func processUID(pid int) (uid uint32, ok bool) {
	if pid <= 0 || !procIsOwn() {
		return 0, false
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil {
		return 0, false
	}
	return st.Uid, true
}

// procIsOwn reports whether /proc shows this process's pid namespace:
// /proc/self names this process's pid.
func procIsOwn() bool {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(self)
	return err == nil && pid == os.Getpid()
}
