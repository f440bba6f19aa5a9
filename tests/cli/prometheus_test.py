"""The Prometheus exposition of `status --prometheus` and of serve's /metrics,
read by a real parser (Debian's python3-prometheus-client), after a history
made by real processes: acquisitions, a wait that timed out, a crash taken
over. Run with /usr/bin/python3; argv[1] is the offload-lock command."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

BIN = sys.argv.pop(1) if len(sys.argv) > 1 else os.environ.get("OFFLOAD_LOCK_BIN", "offload-lock")


def cli(lock, *args, check=True, **kw):
    r = subprocess.run([BIN, "--lock", lock, *args], capture_output=True, text=True, timeout=60, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{args}: exit {r.returncode}: {r.stderr}")
    return r


def samples(text):
    """Every sample as (name, labels, value), and each family's type by sample name."""
    out, types = [], {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels), s.value))
            types[s.name] = family.type
    return out, types


def value(all_samples, name, **labels):
    found = [v for n, l, v in all_samples if n == name and all(l.get(k) == w for k, w in labels.items())]
    if len(found) != 1:
        raise AssertionError(f"{name} {labels}: {len(found)} samples")
    return found[0]


class Exposition(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="offload-lock-prom-")
        cls.lock = os.path.join(cls.dir.name, "gpu.lock")
        lock = cls.lock
        cli(lock, "history", "--start")
        cli(lock, "run", "--label", 'quo"te\\back\nline', "--", "true")
        cli(lock, "run", "--label", "render", "--", "true")
        # A holder that times one wait out, then dies holding the lock; the
        # next acquisition takes it over.
        holder = subprocess.Popen([BIN, "--lock", lock, "hold", "--label", "doomed"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().startswith("acquired ")
        cli(lock, "acquire", "--wait", "200ms", "--label", "impatient", check=False)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        cli(lock, "run", "--label", "after-crash", "--", "true")

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def check(self, text):
        all_samples, types = samples(text)
        lock = self.lock
        # The counters from the history: 4 acquired (the doomed one too), 1
        # timed out; 3 released, 1 crashed.
        self.assertEqual(types["offload_lock_acquisitions_total"], "counter")
        self.assertEqual(value(all_samples, "offload_lock_acquisitions_total", lock=lock, gpu="0", outcome="acquired"), 4)
        self.assertEqual(value(all_samples, "offload_lock_acquisitions_total", lock=lock, gpu="0", outcome="timed-out"), 1)
        self.assertEqual(value(all_samples, "offload_lock_holds_total", lock=lock, gpu="0", outcome="released"), 3)
        self.assertEqual(value(all_samples, "offload_lock_holds_total", lock=lock, gpu="0", outcome="crashed"), 1)
        self.assertEqual(types["offload_lock_held_seconds_total"], "counter")
        self.assertGreaterEqual(value(all_samples, "offload_lock_held_seconds_total", lock=lock, gpu="0", outcome="crashed"), 0)
        # The wait histogram: cumulative buckets up to +Inf, which is the count.
        self.assertEqual(types["offload_lock_wait_seconds_bucket"], "histogram")
        for outcome, n in (("acquired", 4), ("timed-out", 1)):
            buckets = sorted(
                ((float(l["le"]), v) for s, l, v in all_samples
                 if s == "offload_lock_wait_seconds_bucket" and l["outcome"] == outcome),
                key=lambda b: b[0])
            self.assertEqual(buckets[-1][0], float("inf"))
            self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets))
            self.assertEqual(buckets[-1][1], n)
            self.assertEqual(value(all_samples, "offload_lock_wait_seconds_count", gpu="0", outcome=outcome), n)
        self.assertGreaterEqual(value(all_samples, "offload_lock_wait_seconds_sum", outcome="timed-out"), 0.2)
        self.assertEqual(value(all_samples, "offload_lock_history_kept", lock=lock), 1)
        self.assertEqual(value(all_samples, "offload_lock_history_skipped_lines", lock=lock, reason="malformed"), 0)
        # The gauges of now are still there.
        self.assertEqual(value(all_samples, "offload_lock_held", lock=lock, gpu="0"), 0)
        self.assertEqual(types["offload_lock_waiters"], "gauge")

    def test_status_prometheus(self):
        r = cli(self.lock, "status", "--prometheus")
        self.check(r.stdout)

    def test_serve_metrics(self):
        serve = subprocess.Popen([BIN, "--lock", self.lock, "serve", "--listen", "127.0.0.1:0"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            url = re.search(r"on (http://\S+)", serve.stdout.readline()).group(1)
            with urllib.request.urlopen(url + "metrics", timeout=30) as r:
                self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
                self.check(r.read().decode())
            with urllib.request.urlopen(url + "history.json", timeout=30) as r:
                h = json.loads(r.read())
                self.assertEqual(h["totals"]["crashes"], 1)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)

    def test_hostile_label_values(self):
        # A holder's label with a quote, a backslash and a newline stays one
        # valid label value (the parser refuses the exposition otherwise).
        lock = os.path.join(self.dir.name, "other.lock")
        label = 'quo"te\\back\nline'
        holder = subprocess.Popen([BIN, "--lock", lock, "hold", "--label", label], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            self.assertTrue(holder.stdout.readline().startswith("acquired "))
            all_samples, _ = samples(cli(lock, "status", "--prometheus").stdout)
            shown = [l["label"] for n, l, v in all_samples if n == "offload_lock_holder_info"]
            self.assertEqual(shown, [label])  # the exposition's escapes give it back exactly
        finally:
            holder.stdin.close()
            holder.wait(30)


if __name__ == "__main__":
    unittest.main()
