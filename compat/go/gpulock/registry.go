package gpulock

import (
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
)

// The queue's registry, read as offload-lock's registry_reader reads it
// (src/registry.cpp). Beside the lock "<parent>/<name>" (slot 0's), the
// directory "<parent>/.<name>.queue" holds one directory per user, and in
// each, one "<pid>-<12 hex>.json" entry per waiting acquisition (with a
// "<pid>-<12 hex>.wake" FIFO beside it, never opened here).

const (
	// maxWaiterEntrySize is the most read of one registry entry; a larger
	// entry is not an entry. A real one is a few hundred bytes. The same
	// cap as offload-lock's (waiter_entry_cap, src/registry.hpp).
	maxWaiterEntrySize = 4096

	// maxTopNames is how many names of the registry directory itself are
	// read (in directory order): anyone who may write beside the lock may
	// write there, so a flood costs a bounded listing.
	maxTopNames = 256

	// maxForeignNames is how many names of another user's directory are
	// read (in directory order); maxOwnNames, of a directory of the user
	// running Waiters (one user's queue of thousands of waiters).
	maxForeignNames = 256
	maxOwnNames     = 16384

	// maxForeignDirs is how many other users' directories are read, the
	// first by name; this user's own are always read.
	maxForeignDirs = 64

	// oPath is O_PATH on Linux (package syscall does not name it): a
	// descriptor to fstat a name without opening what it names.
	oPath = 0x200000

	// atFDCWD is AT_FDCWD on Linux: openat's directory for a relative path
	// is then the working directory.
	atFDCWD = -100

	// fOFDGetlk is F_OFD_GETLK on Linux, which package syscall does not
	// name.
	fOFDGetlk = 36
)

// queueDir returns the registry directory of the lock at lockPath as its
// parent directory and its name there, splitting the path as offload-lock
// does: trailing slashes dropped, the last component is the lock's name and
// the rest (or ".") its parent. Not cleaned otherwise. ok is false when the
// path names no directory ("" or "/").
func queueDir(lockPath string) (parent, name string, ok bool) {
	p := lockPath
	for len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	if p == "" || p == "/" {
		return "", "", false
	}
	parent, base := ".", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		parent, base = p[:i], p[i+1:]
		if i == 0 {
			parent = "/"
		}
	}
	return parent, "." + base + ".queue", true
}

// queuedEntry is one live entry, with what orders it.
type queuedEntry struct {
	rec     waiterRecord
	uid     uint32 // its author: the owner of the file and of its directory
	dir     string // its author's directory in the registry
	name    string
	arrival int64 // the file's ctime, ns: set when it was renamed into place
}

// servedBefore is offload-lock's serving order (served_before): priority
// (highest first), then arrival (earliest first), then author, directory
// and name, so that every reader orders the same entries alike.
func servedBefore(a, b *queuedEntry) bool {
	if a.rec.priority != b.rec.priority {
		return a.rec.priority > b.rec.priority
	}
	if a.arrival != b.arrival {
		return a.arrival < b.arrival
	}
	if a.uid != b.uid {
		return a.uid < b.uid
	}
	if a.dir != b.dir {
		return a.dir < b.dir
	}
	return a.name < b.name
}

// readQueue returns the live entries of the registry of the lock at
// lockPath, in serving order; nil when there is none or it cannot be read.
func readQueue(lockPath string) []queuedEntry {
	parent, name, ok := queueDir(lockPath)
	if !ok {
		return nil
	}
	// The parent may be reached through a symlink, as the lock is; the
	// registry itself and everything in it may not.
	pfd, err := openRetry(atFDCWD, parent, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC)
	if err != nil {
		return nil
	}
	top, err := openRetry(pfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC)
	syscall.Close(pfd)
	if err != nil {
		return nil
	}
	defer syscall.Close(top)
	names, ok := listNames(top, maxTopNames)
	if !ok {
		return nil
	}
	// Every directory among the first names, whatever its name, speaks for
	// its owner; anything else is junk.
	owners := map[string]uint32{}
	for _, n := range names {
		if st, ok := statAt(top, n); ok && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			owners[n] = st.Uid
		}
	}
	dirs := make([]string, 0, len(owners))
	for n := range owners {
		dirs = append(dirs, n)
	}
	sort.Strings(dirs)
	me := uint32(os.Geteuid())
	var out []queuedEntry
	foreign := 0
	for _, d := range dirs {
		uid := owners[d]
		if uid != me {
			foreign++
			if foreign > maxForeignDirs {
				continue
			}
		}
		out = append(out, readUserDir(top, d, uid, uid == me)...)
	}
	sort.Slice(out, func(i, j int) bool { return servedBefore(&out[i], &out[j]) })
	return out
}

// readUserDir returns the live entries of the user directory dir of the
// registry open at top, whose owner was uid when the registry was listed.
func readUserDir(top int, dir string, uid uint32, mine bool) []queuedEntry {
	d, err := openRetry(top, dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC)
	if err != nil {
		return nil
	}
	defer syscall.Close(d)
	// A directory speaks for its owner alone; one whose owner changed since
	// the listing is not read.
	var st syscall.Stat_t
	if fstatRetry(d, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Uid != uid {
		return nil
	}
	limit := maxForeignNames
	if mine {
		limit = maxOwnNames
	}
	names, ok := listNames(d, limit)
	if !ok {
		return nil
	}
	var out []queuedEntry
	for _, n := range names {
		pid, ok := entryNamePID(n)
		if !ok {
			continue
		}
		if e, ok := readQueueEntry(d, n, pid, uid); ok {
			e.dir = dir
			out = append(out, e)
		}
	}
	return out
}

// readQueueEntry reads the entry name (whose name gives pid) of the user
// directory open at d, owned by uid. ok is false unless it is a live entry:
// a regular file of the directory's owner, at most maxWaiterEntrySize bytes,
// write-locked by someone, holding a record of the pid its name gives, and
// (unless it is root's) not naming a process of another user.
func readQueueEntry(d int, name string, pid int64, uid uint32) (queuedEntry, bool) {
	// Never following a symlink, never blocking on a FIFO.
	fd, err := openRetry(d, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC)
	if err != nil {
		return queuedEntry{}, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st syscall.Stat_t
	// One fstat, not a read, for each of a flood of oversized or foreign
	// files.
	if fstatRetry(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid != uid ||
		st.Size > maxWaiterEntrySize {
		return queuedEntry{}, false
	}
	// The proof of life comes first: a file nobody write-locks is a waiter
	// that left or died, whatever it says.
	if writeLock(fd) == probeUnlocked {
		return queuedEntry{}, false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxWaiterEntrySize+1))
	if err != nil || len(data) > maxWaiterEntrySize {
		return queuedEntry{}, false
	}
	rec, ok := parseWaiterRecord(data)
	if !ok || rec.pid != pid {
		return queuedEntry{}, false
	}
	// The owner's execute bit says priority 0 (readers place such an entry
	// by its mode); one whose record says otherwise is not an entry.
	if st.Mode&priorityZeroBit != 0 && rec.priority != 0 {
		return queuedEntry{}, false
	}
	// A file naming a process of another user (visible in this pid
	// namespace) is a forgery: only root speaks for others.
	if uid != 0 {
		if owner, ok := processUID(int(rec.pid)); ok && owner != uid {
			return queuedEntry{}, false
		}
	}
	return queuedEntry{
		rec:     rec,
		uid:     uid,
		name:    name,
		arrival: int64(st.Ctim.Sec)*1_000_000_000 + int64(st.Ctim.Nsec),
	}, true
}

// priorityZeroBit is the mode bit (the owner's execute bit) an entry written
// at priority 0 carries.
const priorityZeroBit = 0o100

// entryNamePID reports whether name is a registry entry's,
// "<1 to 10 decimal digits>-<12 lowercase hex>.json", and the number its
// digits give. Entries being written (".<pid>-<hex>.tmp"), wake channels
// ("<pid>-<hex>.wake") and any other name are not entries.
func entryNamePID(name string) (int64, bool) {
	s := strings.TrimSuffix(name, ".json")
	if len(s) == len(name) || len(s) == 0 {
		return 0, false
	}
	dash := strings.IndexByte(s, '-')
	if dash <= 0 || dash > 10 || len(s)-dash-1 != 12 {
		return 0, false
	}
	var pid int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i < dash:
			if c < '0' || c > '9' {
				return 0, false
			}
			pid = pid*10 + int64(c-'0')
		case i > dash:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return 0, false
			}
		}
	}
	return pid, true
}

// listNames returns at most limit names of the directory open at d (without
// "." and ".."), from its start, in directory order: the names offload-lock
// reads when it lists with the same cap.
func listNames(d int, limit int) ([]string, bool) {
	// A descriptor of its own, so that the listing's offset is not d's and
	// closing the listing does not close d.
	own, err := openRetry(d, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(own), ".")
	defer f.Close()
	names, err := f.Readdirnames(limit)
	if err != nil && err != io.EOF {
		return nil, false
	}
	return names, true
}

// statAt is fstatat(d, name, AT_SYMLINK_NOFOLLOW), through an O_PATH
// descriptor (package syscall exports no fstatat on every architecture).
func statAt(d int, name string) (syscall.Stat_t, bool) {
	var st syscall.Stat_t
	fd, err := openRetry(d, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC)
	if err != nil {
		return st, false
	}
	defer syscall.Close(fd)
	return st, fstatRetry(fd, &st) == nil
}

// openRetry is openat, retried on EINTR.
func openRetry(d int, name string, flags int) (int, error) {
	for {
		fd, err := syscall.Openat(d, name, flags, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// fstatRetry is fstat, retried on EINTR.
func fstatRetry(fd int, st *syscall.Stat_t) error {
	for {
		if err := syscall.Fstat(fd, st); err != syscall.EINTR {
			return err
		}
	}
}

// lockProbe is what F_OFD_GETLK says of a file.
type lockProbe int

const (
	probeLocked lockProbe = iota
	probeUnlocked
	// probeUnknown: the question failed, which is no evidence either way;
	// offload-lock then reads the entry as it reads a locked one.
	probeUnknown
)

// writeLock asks whether another open file description holds a write lock
// on the file open at fd: F_OFD_GETLK asks for a read lock over the whole
// file and reports F_UNLCK when nothing conflicts, and only a write lock
// conflicts with a read lock. It takes no lock itself.
func writeLock(fd int) lockProbe {
	for {
		lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: 0, Start: 0, Len: 0}
		err := syscall.FcntlFlock(uintptr(fd), fOFDGetlk, &lk)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return probeUnknown
		case lk.Type == syscall.F_UNLCK:
			return probeUnlocked
		default:
			return probeLocked
		}
	}
}
