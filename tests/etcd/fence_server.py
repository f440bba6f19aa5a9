"""The fencing server of doc/etcd.md, and a client for it.

  fence_server.py serve PORT   answers POST /jobs: 200 "accepted" for a fencing token
                               (header X-Fence) no lower than the highest seen, else 409
  fence_server.py send PORT    POSTs with $OFFLOAD_LOCK_FENCE, prints the answer
"""
import http.server
import os
import sys
import urllib.error
import urllib.request

highest = 0  # the highest fencing token seen


class Jobs(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global highest
        fence = int(self.headers.get("X-Fence", "0"))
        if fence < highest:  # a holder that has lost the lock since
            self.send_response(409)
            self.end_headers()
            self.wfile.write(f"stale fencing token {fence}, seen {highest}\n".encode())
            return
        highest = fence
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"accepted\n")

    def log_message(self, *args):
        pass


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "serve":
        server = http.server.HTTPServer(("127.0.0.1", port), Jobs)
        print("ready", flush=True)
        server.serve_forever()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/jobs", data=b"job", method="POST",
                                 headers={"X-Fence": os.environ["OFFLOAD_LOCK_FENCE"]})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            print(r.read().decode().strip())
    except urllib.error.HTTPError as e:
        print(e.read().decode().strip())


main()
