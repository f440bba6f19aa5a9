package gpulock

// Reading etcd locks and the fleet view (doc/etcd.md), with the standard
// library only: etcd's JSON gateway over HTTP/1.1 (POST /v3/kv/range, keys
// and values base64, 64-bit numbers as strings). Read-only, like the rest of
// this package: nothing is ever written to etcd.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EtcdScheme starts the path of a lock kept in etcd:
// "etcd://HOST:PORT[,HOST:PORT...]/NAME".
const EtcdScheme = "etcd://"

// FleetEnv names the variable that gives the fleet's etcd endpoints
// ("etcd://HOST:PORT[,HOST:PORT...]"), as offload-lock reads it.
const FleetEnv = "OFFLOAD_LOCK_FLEET"

// IsEtcd reports whether lockPath names an etcd lock.
func IsEtcd(lockPath string) bool { return strings.HasPrefix(lockPath, EtcdScheme) }

// etcdCallTimeout bounds one request to one member; the next member is
// tried after it, as offload-lock does.
var etcdCallTimeout = 2 * time.Second

// maxEtcdReply bounds what a member's reply may be: more is an error, never
// read whole.
const maxEtcdReply = 16 << 20

// maxRecord bounds one key's value, as offload-lock writes and reads it.
const maxRecord = 8 << 10

// ErrEtcd wraps every failure to read etcd (no member answered, a reply
// that is not etcd's).
var ErrEtcd = errors.New("etcd")

type etcdAddress struct {
	endpoints []string // "host:port", for http://
	name      string
}

func parseEndpoints(list string) ([]string, error) {
	if list == "" {
		return nil, fmt.Errorf("%w: no endpoint", ErrEtcd)
	}
	var out []string
	for _, e := range strings.Split(list, ",") {
		if e == "" {
			return nil, fmt.Errorf("%w: an empty endpoint in %q", ErrEtcd, list)
		}
		host, port := e, "2379"
		if strings.HasPrefix(e, "[") {
			end := strings.Index(e, "]")
			if end < 0 {
				return nil, fmt.Errorf("%w: endpoint %q", ErrEtcd, e)
			}
			host = e[:end+1]
			if rest := e[end+1:]; rest != "" {
				if !strings.HasPrefix(rest, ":") {
					return nil, fmt.Errorf("%w: endpoint %q", ErrEtcd, e)
				}
				port = rest[1:]
			}
		} else if i := strings.LastIndex(e, ":"); i >= 0 {
			host, port = e[:i], e[i+1:]
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
			return nil, fmt.Errorf("%w: endpoint %q", ErrEtcd, e)
		}
		for _, c := range host {
			if !(c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c >= '0' && c <= '9' ||
				c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return nil, fmt.Errorf("%w: endpoint %q", ErrEtcd, e)
			}
		}
		out = append(out, host+":"+port)
	}
	if len(out) > 16 {
		return nil, fmt.Errorf("%w: more than 16 endpoints", ErrEtcd)
	}
	return out, nil
}

func parseEtcdPath(lockPath string) (etcdAddress, error) {
	if !IsEtcd(lockPath) {
		return etcdAddress{}, fmt.Errorf("%w: %q is not an etcd lock", ErrEtcd, lockPath)
	}
	rest := lockPath[len(EtcdScheme):]
	slash := strings.Index(rest, "/")
	if slash < 0 {
		return etcdAddress{}, fmt.Errorf("%w: %q has no lock name", ErrEtcd, lockPath)
	}
	eps, err := parseEndpoints(rest[:slash])
	if err != nil {
		return etcdAddress{}, err
	}
	name := rest[slash+1:]
	if name == "" || len(name) > 200 || name == "." || name == ".." {
		return etcdAddress{}, fmt.Errorf("%w: lock name %q", ErrEtcd, name)
	}
	for _, c := range name {
		if !(c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return etcdAddress{}, fmt.Errorf("%w: lock name %q", ErrEtcd, name)
		}
	}
	return etcdAddress{eps, name}, nil
}

type etcdKV struct {
	Key            string `json:"key"`
	Value          string `json:"value"`
	CreateRevision string `json:"create_revision"`
	Lease          string `json:"lease"`
}

type etcdRange struct {
	Header struct {
		Revision string `json:"revision"`
	} `json:"header"`
	Kvs []etcdKV `json:"kvs"`
}

type kv struct {
	key, value     string
	createRevision int64
	lease          int64
}

// prefixEnd is the end of the range of every key starting with prefix.
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

func optInt(s string) (int64, bool) {
	if s == "" {
		return 0, true
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// rangePrefix reads every key under prefix from the first member that
// answers.
func rangePrefix(endpoints []string, prefix string) ([]kv, error) {
	body, _ := json.Marshal(map[string]string{
		"key":       base64.StdEncoding.EncodeToString([]byte(prefix)),
		"range_end": base64.StdEncoding.EncodeToString([]byte(prefixEnd(prefix))),
	})
	client := &http.Client{Timeout: etcdCallTimeout}
	var failures []string
	for _, ep := range endpoints {
		resp, err := client.Post("http://"+ep+"/v3/kv/range", "application/json", bytes.NewReader(body))
		if err != nil {
			failures = append(failures, err.Error())
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxEtcdReply+1))
		resp.Body.Close()
		if err != nil || len(data) > maxEtcdReply {
			failures = append(failures, ep+": reply unreadable or too large")
			continue
		}
		if resp.StatusCode != http.StatusOK {
			failures = append(failures, ep+": HTTP "+strconv.Itoa(resp.StatusCode))
			continue
		}
		var r etcdRange
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("%w: %s sent a malformed reply", ErrEtcd, ep)
		}
		out := make([]kv, 0, len(r.Kvs))
		for _, e := range r.Kvs {
			k, err1 := base64.StdEncoding.DecodeString(e.Key)
			v, err2 := base64.StdEncoding.DecodeString(e.Value)
			cr, ok1 := optInt(e.CreateRevision)
			lease, ok2 := optInt(e.Lease)
			if err1 != nil || err2 != nil || !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: %s sent a malformed key", ErrEtcd, ep)
			}
			out = append(out, kv{string(k), string(v), cr, lease})
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: no endpoint answered (%s)", ErrEtcd, strings.Join(failures, "; "))
}

// etcdRecord is a holder's or a waiter's record, as offload-lock writes it;
// decoding into these types refuses a value of another type.
type etcdRecord struct {
	PID       int64  `json:"pid"`
	StartedAt int64  `json:"startedAt"`
	Label     string `json:"label"`
	Host      string `json:"host"`
	Token     string `json:"token"`
	Priority  int    `json:"priority"`
	ExpectMs  int64  `json:"expectMs"`
}

func decodeRecord(value string) (etcdRecord, bool) {
	var r etcdRecord
	if len(value) > maxRecord || json.Unmarshal([]byte(value), &r) != nil {
		return etcdRecord{}, false
	}
	if r.PID < 0 || r.PID > 2147483647 || r.Priority < -100 || r.Priority > 100 || r.ExpectMs < 0 || r.StartedAt < 0 {
		return etcdRecord{}, false
	}
	return r, true
}

type etcdView struct {
	holder    *kv
	holderRec etcdRecord
	holderOK  bool
	queue     []kv
	records   []etcdRecord
}

func lookEtcd(a etcdAddress) (etcdView, error) {
	prefix := "/offload-lock/lock/" + a.name + "/"
	kvs, err := rangePrefix(a.endpoints, prefix)
	if err != nil {
		return etcdView{}, err
	}
	var v etcdView
	type waiting struct {
		kv  kv
		rec etcdRecord
	}
	var ws []waiting
	for i := range kvs {
		e := kvs[i]
		switch {
		case e.key == prefix+"holder":
			v.holder = &kvs[i]
			v.holderRec, v.holderOK = decodeRecord(e.value)
		case strings.HasPrefix(e.key, prefix+"queue/"):
			// Only a waiter's entry: named by the lease it is attached to.
			if e.lease == 0 || e.key[len(prefix)+6:] != fmt.Sprintf("%016x", e.lease) {
				continue
			}
			rec, _ := decodeRecord(e.value)
			ws = append(ws, waiting{e, rec})
		}
	}
	sort.SliceStable(ws, func(i, j int) bool {
		if ws[i].rec.Priority != ws[j].rec.Priority {
			return ws[i].rec.Priority > ws[j].rec.Priority
		}
		return ws[i].kv.createRevision < ws[j].kv.createRevision
	})
	for _, w := range ws {
		v.queue = append(v.queue, w.kv)
		v.records = append(v.records, w.rec)
	}
	return v, nil
}

// InspectEtcd is Inspect for an etcd lock, with the error Inspect leaves
// out: the lock is held exactly while its holder key exists, whatever its
// value (a value that is not a record leaves Label saying so). Fence is the
// holder's fencing token. It blocks for at most a few seconds per endpoint
// that does not answer. Safe for concurrent use.
func InspectEtcd(lockPath string) (Info, error) {
	a, err := parseEtcdPath(lockPath)
	if err != nil {
		return Info{}, err
	}
	v, err := lookEtcd(a)
	if err != nil || v.holder == nil {
		return Info{}, err
	}
	info := Info{Held: true, Fence: uint64(v.holder.createRevision)}
	if !v.holderOK {
		info.Label = "an unreadable holder record"
		return info, nil
	}
	r := v.holderRec
	now := time.Now()
	info.PID = int(r.PID)
	info.Label = r.Label
	info.Host = r.Host
	info.Priority = r.Priority
	if r.StartedAt > 0 {
		info.StartedAt = time.UnixMilli(r.StartedAt)
		info.Age = now.Sub(info.StartedAt)
		if info.Age < 0 {
			info.Age = 0
		}
	}
	if r.ExpectMs > 0 {
		info.ExpectMs = r.ExpectMs
		free := info.StartedAt.Add(time.Duration(r.ExpectMs) * time.Millisecond)
		if r.StartedAt <= 0 || free.Before(now) {
			free = now
		}
		info.ExpectedFree = free
	}
	return info, nil
}

// waitersEtcd is Waiters for an etcd lock: the order served (priority, then
// arrival: the entry's create revision), positions 1, 2, ...
func waitersEtcd(lockPath string) ([]Waiter, error) {
	a, err := parseEtcdPath(lockPath)
	if err != nil {
		return nil, err
	}
	v, err := lookEtcd(a)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []Waiter
	for k, r := range v.records {
		since := time.UnixMilli(r.StartedAt)
		waited := now.Sub(since)
		if r.StartedAt <= 0 || waited < 0 {
			waited = 0
		}
		out = append(out, Waiter{PID: int(r.PID), Label: r.Label, Host: r.Host, Since: since, Waited: waited,
			GPU: -1, GPUs: 1, Position: k + 1, Priority: r.Priority, ExpectMs: r.ExpectMs})
	}
	return out, nil
}

// WaitersEtcd is Waiters for an etcd lock, with the error Waiters leaves out.
func WaitersEtcd(lockPath string) ([]Waiter, error) { return waitersEtcd(lockPath) }

// FleetEntry is one published holder or waiter of one host's local lock.
type FleetEntry struct {
	Host     string
	Path     string // the lock (or GPU slot) path on that host
	GPU      int
	Holding  bool // holds the lock; else waits for it
	PID      int
	Label    string
	Token    string
	Device   string // "GPU-… (name)" when known
	Since    time.Time
	ExpectMs int64
	Priority int
}

type fleetRecord struct {
	Host     string `json:"host"`
	Path     string `json:"path"`
	GPU      int    `json:"gpu"`
	Holding  bool   `json:"holding"`
	PID      int64  `json:"pid"`
	Label    string `json:"label"`
	Token    string `json:"token"`
	Device   string `json:"device"`
	Since    int64  `json:"since"`
	ExpectMs int64  `json:"expectMs"`
	Priority int    `json:"priority"`
}

// Fleet reads every host's published holders and waiters (doc/etcd.md "The
// fleet view") from endpoints ("etcd://HOST:PORT[,...]"; "" reads
// OFFLOAD_LOCK_FLEET), in one range. Records that are not records are left
// out. Holders first, then waiters in the order each lock serves them.
func Fleet(endpoints string) ([]FleetEntry, error) {
	if endpoints == "" {
		endpoints = os.Getenv(FleetEnv)
	}
	if !IsEtcd(endpoints) {
		return nil, fmt.Errorf("%w: %s is not etcd://HOST:PORT[,HOST:PORT...]", ErrEtcd, FleetEnv)
	}
	eps, err := parseEndpoints(strings.TrimSuffix(endpoints[len(EtcdScheme):], "/"))
	if err != nil {
		return nil, err
	}
	kvs, err := rangePrefix(eps, "/offload-lock/fleet/")
	if err != nil {
		return nil, err
	}
	var out []FleetEntry
	for _, e := range kvs {
		var r fleetRecord
		if len(e.value) > maxRecord || json.Unmarshal([]byte(e.value), &r) != nil || r.Host == "" || r.Path == "" ||
			r.PID < 0 || r.PID > 2147483647 || r.Priority < -100 || r.Priority > 100 || r.GPU < 0 || r.GPU > 1023 {
			continue
		}
		out = append(out, FleetEntry{Host: r.Host, Path: r.Path, GPU: r.GPU, Holding: r.Holding, PID: int(r.PID),
			Label: r.Label, Token: r.Token, Device: r.Device, Since: time.UnixMilli(r.Since), ExpectMs: r.ExpectMs,
			Priority: r.Priority})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Holding != b.Holding {
			return a.Holding
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.Since.Before(b.Since)
	})
	return out, nil
}
