#!/usr/bin/python3
"""A small S3 server on 127.0.0.1 that can be told to misbehave, for dsfs's fault tests.

It keeps objects in memory and speaks the part of S3 that dsfs uses (bucket create, PUT, ranged
GET, HEAD, DELETE, ListObjectsV2, multipart upload), path-style, without checking signatures.
`dsfs push` uploads to it like to any gateway; then the test writes a mode into STATE/mode and
every later request that matches misbehaves:

  normal                        answers as S3 does
  drip RATE [MATCH]             the body of a GET at RATE bytes/s (headers at once)
  endless [MATCH]               a GET answered 206 with a body that never ends (no length)
  oversize [MATCH]              a GET answered with ten times the bytes asked
  error STATUS TEXT [MATCH]     every request answered STATUS with <Code>TEXT</Code>; TEXT is
                                Python-unescaped (\\n, \\x1b) first
  bigclaim RATE [MATCH]         a GET answered with a Content-Length of 10^15, the bytes at RATE/s
  errcomplete TEXT              a multipart completion answered 200 with <Error><Code>TEXT
  stall [MATCH]                 the request read, then no answer at all
  reset [MATCH]                 the connection closed without an answer

MATCH (a substring of the request path, e.g. /data/) limits the mode to those requests; others
are answered normally. STATE/requests counts requests (one line each: METHOD PATH RANGE).

Usage: hostile_s3.py STATE_DIR [WATCH_PID [RELAY_PORT]]: prints "endpoint=http://127.0.0.1:PORT"
once it listens; exits when WATCH_PID (the test) is gone, or on SIGTERM.

With RELAY_PORT it is no server of its own but a TCP relay to 127.0.0.1:RELAY_PORT (a real
gateway: Ceph RGW), so requests stay signed by the client and checked by the gateway (SigV4,
403); the modes drip, stall and reset then apply to the gateway's answers on every connection
made after the mode was set (MATCH is ignored: the relay does not parse HTTP).
"""
import select
import socket
import http.server
import os
import re
import socketserver
import sys
import threading
import time
import urllib.parse
import uuid
from xml.sax.saxutils import escape

OBJECTS = {}  # (bucket, key) -> (bytes, {meta})
UPLOADS = {}  # upload id -> (bucket, key, meta, {part: bytes})
LOCK = threading.Lock()
STATE = sys.argv[1]


def note(line):
    """Counts a hostile answer (STATE/requests, one line each)."""
    with open(os.path.join(STATE, "requests"), "a") as f:
        f.write(line + "\n")


def watch_parent(watch):
    """Returns never: exits once process `watch` (the test) is gone."""
    while True:
        time.sleep(0.2)
        if watch and not os.path.exists(f"/proc/{watch}"):
            os._exit(0)


def mode():
    try:
        with open(os.path.join(STATE, "mode")) as f:
            words = f.read().split()
    except OSError:
        return ["normal"]
    return words or ["normal"]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def split(self):
        url = urllib.parse.urlsplit(self.path)
        parts = urllib.parse.unquote(url.path).lstrip("/").split("/", 1)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        return parts[0], (parts[1] if len(parts) > 1 else ""), query

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def answer(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def misbehave(self):
        """Answers the request the hostile way if the mode says so; True if it did."""
        m = mode()
        kind = m[0]
        match = {"drip": 2, "bigclaim": 2, "error": 3, "errcomplete": 2}.get(kind, 1)
        if len(m) > match and m[match] not in self.path:
            return False
        note(f"{self.command} {self.path} {self.headers.get('Range', '-')}")
        if kind == "error":
            self.body()
            text = m[2].encode().decode("unicode_escape")
            xml = f"<?xml version='1.0'?><Error><Code>{text}</Code></Error>".encode()
            self.answer(int(m[1]), xml, {"Content-Type": "application/xml"})
            return True
        if kind == "stall":
            self.body()
            time.sleep(3600)
            return True
        if kind == "errcomplete":
            if self.command != "POST" or "uploadId" not in self.path:
                return False
            self.body()
            text = m[1].encode().decode("unicode_escape")
            self.answer(200, f"<Error><Code>{text}</Code></Error>".encode())
            return True
        if kind == "reset":
            self.close_connection = True
            self.connection.shutdown(2)
            return True
        if self.command != "GET" or kind not in ("drip", "bigclaim", "endless", "oversize"):
            return False
        data, first, last = self.ranged()
        if data is None:
            return False
        piece = data[first:last + 1]
        if kind == "endless":
            self.send_response(206)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            chunk = (piece or b"x") * (65536 // max(1, len(piece)) + 1)
            try:
                while True:
                    self.wfile.write(chunk)
            except OSError:
                return True
        if kind == "oversize":
            big = piece * 10
            self.answer(206, big, {"Content-Range": f"bytes {first}-{first + len(big) - 1}/*"})
            return True
        rate = max(1, int(m[1]))
        self.send_response(206 if "Range" in self.headers else 200)
        self.send_header("Content-Length", str(10**15 if kind == "bigclaim" else len(piece)))
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.end_headers()
        try:
            for i in range(0, len(piece), rate):
                self.wfile.write(piece[i:i + rate])
                self.wfile.flush()
                time.sleep(1)
        except OSError:
            pass
        self.close_connection = True
        return True

    def ranged(self):
        bucket, key, _ = self.split()
        with LOCK:
            obj = OBJECTS.get((bucket, key))
        if obj is None:
            return None, 0, 0
        data = obj[0]
        first, last = 0, len(data) - 1
        r = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if r:
            first = int(r.group(1))
            if r.group(2):
                last = min(last, int(r.group(2)))
        return data, first, last

    def do_PUT(self):
        if self.misbehave():
            return
        bucket, key, q = self.split()
        data = self.body()
        if not key:
            self.answer(200)
            return
        if "uploadId" in q:
            with LOCK:
                UPLOADS[q["uploadId"][0]][3][int(q["partNumber"][0])] = data
            self.answer(200, b"", {"ETag": f'"{uuid.uuid4().hex}"'})
            return
        meta = {k.lower(): v for k, v in self.headers.items() if k.lower().startswith("x-amz-meta-")}
        with LOCK:
            OBJECTS[(bucket, key)] = (data, meta)
        self.answer(200, b"", {"ETag": '"x"'})

    def do_POST(self):
        if self.misbehave():
            return
        bucket, key, q = self.split()
        self.body()
        if "uploads" in q:
            uid = uuid.uuid4().hex
            meta = {k.lower(): v for k, v in self.headers.items()
                    if k.lower().startswith("x-amz-meta-")}
            with LOCK:
                UPLOADS[uid] = (bucket, key, meta, {})
            xml = f"<InitiateMultipartUploadResult><UploadId>{uid}</UploadId>" \
                  "</InitiateMultipartUploadResult>"
            self.answer(200, xml.encode())
            return
        uid = q["uploadId"][0]
        with LOCK:
            b, k, meta, parts = UPLOADS.pop(uid)
            OBJECTS[(b, k)] = (b"".join(parts[i] for i in sorted(parts)), meta)
        self.answer(200, b"<CompleteMultipartUploadResult/>")

    def do_DELETE(self):
        if self.misbehave():
            return
        bucket, key, q = self.split()
        with LOCK:
            if "uploadId" in q:
                UPLOADS.pop(q["uploadId"][0], None)
            else:
                OBJECTS.pop((bucket, key), None)
        self.answer(204)

    def do_HEAD(self):
        if self.misbehave():
            return
        bucket, key, _ = self.split()
        with LOCK:
            obj = OBJECTS.get((bucket, key))
        if obj is None:
            self.answer(404)
            return
        self.send_response(200)
        for k, v in obj[1].items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(obj[0])))
        self.end_headers()

    def do_GET(self):
        if self.misbehave():
            return
        bucket, key, q = self.split()
        if not key and "list-type" in q:
            prefix = q.get("prefix", [""])[0]
            with LOCK:
                keys = sorted((k, len(d[0])) for (b, k), d in OBJECTS.items()
                              if b == bucket and k.startswith(prefix))
            xml = "<ListBucketResult><IsTruncated>false</IsTruncated>" + "".join(
                f"<Contents><Key>{escape(k)}</Key><Size>{n}</Size>"
                "<LastModified>2026-01-02T03:04:05.000Z</LastModified></Contents>"
                for k, n in keys) + "</ListBucketResult>"
            self.answer(200, xml.encode())
            return
        data, first, last = self.ranged()
        if data is None:
            self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
            return
        if "Range" in self.headers:
            self.answer(206, data[first:last + 1],
                        {"Content-Range": f"bytes {first}-{last}/{len(data)}"})
        else:
            self.answer(200, data)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def relay(client, port):
    """Passes bytes between `client` and the gateway, the answers as the mode says."""
    m = mode()
    kind = m[0]
    try:
        upstream = socket.create_connection(("127.0.0.1", port))
    except OSError:
        client.close()
        return
    rate = int(m[1]) if kind == "drip" and len(m) > 1 else 0
    try:
        while True:
            ready, _, _ = select.select([client, upstream], [], [], 60)
            if not ready:
                continue
            if client in ready:
                data = client.recv(65536)
                if not data:
                    break
                if kind == "reset":
                    note("relay reset")
                    break
                upstream.sendall(data)
            if upstream in ready:
                data = upstream.recv(65536)
                if not data:
                    break
                if kind == "stall":
                    note("relay stall")
                    time.sleep(3600)
                if rate:
                    note("relay drip")
                    for i in range(0, len(data), rate):
                        client.sendall(data[i:i + rate])
                        time.sleep(1)
                else:
                    client.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (client, upstream):
            try:
                sock.close()
            except OSError:
                pass


def serve_relay(port, watch):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(f"endpoint=http://127.0.0.1:{listener.getsockname()[1]}", flush=True)

    def accept():
        while True:
            client, _ = listener.accept()
            threading.Thread(target=relay, args=(client, port), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    watch_parent(watch)


def main():
    if len(sys.argv) > 3:
        serve_relay(int(sys.argv[3]), int(sys.argv[2]))
        return
    server = Server(("127.0.0.1", 0), Handler)
    print(f"endpoint=http://127.0.0.1:{server.server_address[1]}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    watch_parent(int(sys.argv[2]) if len(sys.argv) > 2 else 0)


if __name__ == "__main__":
    main()
