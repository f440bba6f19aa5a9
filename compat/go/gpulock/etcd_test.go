package gpulock

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startEtcd starts a one-member etcd on loopback ports in a temporary
// directory (stopped at the end of the test) and returns its endpoint.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("no etcd server on this machine (scripts/setup installs etcd-server)")
	}
	ports := make([]int, 2)
	var ls []net.Listener
	for k := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[k] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin, "--name", "go", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "go="+peer, "--logger", "zap", "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	endpoint := fmt.Sprintf("127.0.0.1:%d", ports[0])
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := rangePrefix([]string{endpoint}, "/x"); err == nil {
			return endpoint
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd did not start within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func putKey(t *testing.T, endpoint, key, value string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString([]byte(value)),
	})
	resp, err := http.Post("http://"+endpoint+"/v3/kv/put", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestEtcdLockAsOffloadLockHoldsIt reads an etcd lock that offload-lock
// holds, with a waiter queued behind it, and the fleet view a local holder
// publishes.
func TestEtcdLockAsOffloadLockHoldsIt(t *testing.T) {
	endpoint := startEtcd(t)
	bin := offloadLockBin(t)
	if bin == "" {
		t.Skip("offload-lock binary not found (set OFFLOAD_LOCK_BIN or build it into ../../../build)")
	}
	url := "etcd://" + endpoint + "/gpu"
	if info := Inspect(url); info.Held {
		t.Fatalf("a fresh etcd lock reads held: %+v", info)
	}
	hold := exec.Command(bin, "--lock", url, "hold", "--label", "render", "--expect", "10m", "--priority", "5")
	stdin, _ := hold.StdinPipe()
	stdout, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); hold.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "acquired ") {
		t.Fatalf("hold said %q (%v)", line, err)
	}
	var acquired struct {
		Fence uint64 `json:"fence"`
	}
	if err := json.Unmarshal([]byte(line[len("acquired "):]), &acquired); err != nil || acquired.Fence == 0 {
		t.Fatalf("no fence in %q", line)
	}
	info, err := InspectEtcd(url)
	if err != nil || !info.Held || info.Label != "render" || info.PID != hold.Process.Pid || info.Priority != 5 ||
		info.ExpectMs != 600000 || info.Fence != acquired.Fence || info.ExpectedFree.IsZero() {
		t.Fatalf("InspectEtcd = %+v, %v; want render, pid %d, fence %d", info, err, hold.Process.Pid, acquired.Fence)
	}
	waiter := exec.Command(bin, "--lock", url, "run", "--label", "train", "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(Waiters(url)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never showed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ws := Waiters(url)
	if ws[0].Label != "train" || ws[0].Position != 1 || ws[0].PID != waiter.Process.Pid {
		t.Fatalf("Waiters = %+v", ws)
	}
	stdin.Close()
	hold.Wait()
	if err := waiter.Wait(); err != nil {
		t.Fatalf("the waiter: %v", err)
	}

	// The fleet: a local holder of this host, published.
	lock := filepath.Join(t.TempDir(), "gpu.lock")
	local := exec.Command(bin, "--lock", lock, "hold", "--label", "local")
	local.Env = append(os.Environ(), FleetEnv+"=etcd://"+endpoint)
	lin, _ := local.StdinPipe()
	lout, _ := local.StdoutPipe()
	if err := local.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { lin.Close(); local.Wait() }()
	if _, err := bufio.NewReader(lout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		es, err := Fleet("etcd://" + endpoint)
		if err == nil && len(es) == 1 && es[0].Holding && es[0].Label == "local" && es[0].Path == lock {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fleet = %+v, %v", es, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEtcdHostileValues: a holder key whose value is no record holds the
// lock all the same; queue keys that are no waiter's entry, and fleet
// records that are not records, are left out.
func TestEtcdHostileValues(t *testing.T) {
	endpoint := startEtcd(t)
	url := "etcd://" + endpoint + "/gpu"
	putKey(t, endpoint, "/offload-lock/lock/gpu/holder", `{"pid":"7"}`)
	putKey(t, endpoint, "/offload-lock/lock/gpu/queue/0000000000000001", `{"pid":1}`)
	putKey(t, endpoint, "/offload-lock/fleet/h/1", `junk`)
	putKey(t, endpoint, "/offload-lock/fleet/h/2", `{"host":"h","path":"/p","pid":-1}`)
	info, err := InspectEtcd(url)
	if err != nil || !info.Held || info.PID != 0 || !strings.Contains(info.Label, "unreadable") || info.Fence == 0 {
		t.Fatalf("InspectEtcd = %+v, %v", info, err)
	}
	if ws, err := WaitersEtcd(url); err != nil || len(ws) != 0 {
		t.Fatalf("WaitersEtcd = %+v, %v", ws, err)
	}
	if es, err := Fleet("etcd://" + endpoint); err != nil || len(es) != 0 {
		t.Fatalf("Fleet = %+v, %v", es, err)
	}
	if _, err := InspectEtcd("etcd://127.0.0.1:1/gpu"); err == nil || !strings.Contains(err.Error(), "no endpoint answered") {
		t.Fatalf("an etcd that is down: %v", err)
	}
	for _, bad := range []string{"etcd://h/", "etcd://h:0/x", "etcd://h/x y", "etcd://h,,g/x"} {
		if _, err := InspectEtcd(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
