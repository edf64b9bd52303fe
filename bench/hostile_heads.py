"""How long a hostile upstream's response head holds the proxy's event loop.

Starts `python -m proxy serve` from TREE (a subprocess, so this probe is not sharing its GIL) in
front of a raw upstream that answers with HEAD_KIND; sends one chat request and, while it is in
flight, times GET /healthz every 10 ms. Prints the longest /healthz wait, the hostile request's
status and duration. Everything on 127.0.0.1; capped at CAP seconds.

    python bench/hostile_heads.py TREE 5mb-dup|100mb-dup|100mb-one|trailer-20mb CAP

for example `python bench/hostile_heads.py /tmp/before 5mb-dup 90` and the same with `.`.
"""

import os
import socket
import socketserver
import subprocess
import sys
import threading
import time

import httpx

TREE, KIND, CAP = os.path.abspath(sys.argv[1]), sys.argv[2], float(sys.argv[3])


def head_pieces():
    if KIND == "trailer-20mb":  # a chunked body, then one 20 MB trailer value
        yield b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        yield b"transfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: "
        for _ in range(20):
            yield b"v" * (1024 * 1024)
        yield b"\r\n\r\n"
        return
    yield b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    if KIND == "5mb-dup":  # 5,000 duplicate fields of ~1 KB: 5 MB
        line = b"X-Dup: " + b"a" * 1000 + b"\r\n"
        yield line * 5000
    elif KIND == "100mb-dup":  # 100,000 duplicate fields of ~1 KB: 100 MB
        line = b"X-Dup: " + b"a" * 1000 + b"\r\n"
        for _ in range(100):
            yield line * 1000
    elif KIND == "100mb-one":  # one 100 MB field value
        yield b"X-Big: "
        for _ in range(100):
            yield b"v" * (1024 * 1024)
        yield b"\r\n"
    yield b"content-length: 2\r\n\r\n{}"


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        sock.settimeout(CAP + 10)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        try:
            for piece in head_pieces():
                sock.sendall(piece)
        except OSError:
            pass
        time.sleep(0.5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    upstream = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": TREE}
    url = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--upstream",
            url,
            "--port",
            str(port),
            "--log-level",
            "error",
        ],
        cwd=TREE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        result = {}

        def hostile():
            started = time.monotonic()
            try:
                r = httpx.post(
                    f"{base}/v1/chat/completions",
                    timeout=CAP,
                    json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                )
                result["status"] = r.status_code
                result["body"] = r.text[:160]
            except httpx.HTTPError as exc:
                result["status"] = type(exc).__name__
            result["took"] = time.monotonic() - started

        worker = threading.Thread(target=hostile, daemon=True)
        worker.start()
        worst = 0.0
        deadline = time.monotonic() + CAP
        with httpx.Client(timeout=CAP) as client:
            while worker.is_alive() and time.monotonic() < deadline:
                t = time.monotonic()
                try:
                    client.get(f"{base}/healthz", timeout=max(0.1, deadline - t))
                except httpx.HTTPError:
                    worst = max(worst, time.monotonic() - t)
                    break
                worst = max(worst, time.monotonic() - t)
                time.sleep(0.01)
        worker.join(1)
        cut = "" if not worker.is_alive() else f" (still in flight at the {CAP:.0f} s cap)"
        print(
            f"{KIND} {os.path.basename(TREE)}: longest /healthz {worst * 1000:.0f} ms; "
            f"hostile request: {result.get('status', 'none')} after "
            f"{result.get('took', CAP):.2f} s{cut}; {result.get('body', '')}"
        )
    finally:
        proxy.kill()
        proxy.wait()
        upstream.shutdown()


if __name__ == "__main__":
    main()
