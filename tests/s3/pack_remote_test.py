#!/usr/bin/python3
"""`dsfs pack` of remote sources, streamed (pack/remote_source.h), against
tests/support/hostile_s3.py (an S3 server in memory on 127.0.0.1 that also answers plain
http:// GETs of /BUCKET/KEY, and misbehaves when told):

  s3://B/tree.tar, s3://B/tree.zip   an archive object, read in ranged GETs
  http://HOST/B/tree.tar.gz          an archive at a URL, one GET (gzip checked by zlib)
  s3://B/photos/                     a prefix: its objects (JPEG-like files), a tree
each packed and read back byte for byte with `dsfs cat`; the memory of a pack from s3 stays
that of the same pack from a local file; and each hostile source ends with one error line and
a non-zero exit, in bounded time: a truncated archive (s3 and http), a member name of 300 KB,
a listing with a '..' key, a missing object, an http server that stalls.

With --ceph, the same packs (an archive object, a prefix with more than one page of keys)
against Ceph's RADOS Gateway, started by tests/support/ceph_rgw.sh for the run: signed requests,
the real listing. Prints SKIPPED where Ceph is not installed.

Usage: pack_remote_test.py --dsfs PATH [--ceph]
"""
import argparse
import http.client
import http.server
import ssl
import threading
import io
import os
import random
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "support", "hostile_s3.py")
CEPH = os.path.join(HERE, "..", "support", "ceph_rgw.sh")
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


class S3:
    def __init__(self, state):
        self.state = state
        self.proc = subprocess.Popen(["/usr/bin/python3", SERVER, state, str(os.getpid())],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        assert line.startswith("endpoint="), line
        self.endpoint = line.split("=", 1)[1]
        self.hostport = self.endpoint.split("//")[1]

    def put(self, path, data=b""):
        c = http.client.HTTPConnection(self.hostport, timeout=30)
        c.request("PUT", path, body=data)  # the path as written: '..' is not resolved
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == 200, (path, r.status)

    def mode(self, text):
        with open(os.path.join(self.state, "mode"), "w") as f:
            f.write(text)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def tls_server(tmp, objects):
    """An https server on 127.0.0.1 of `objects` (path -> bytes), its certificate made here
    (a CA the system does not know); returns (url, cert path, server)."""
    key, cert = os.path.join(tmp, "tls.key"), os.path.join(tmp, "tls.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            data = objects.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return "https://127.0.0.1:%d" % server.server_address[1], cert, server


def make_files():
    rnd = random.Random(4)
    files = {}
    for i in range(12):
        # Not decodable as JPEG: no warning per file (the bytes are what is checked).
        files["train/c%d/%03d.jpg" % (i % 3, i)] = rnd.randbytes(rnd.randrange(100, 200000))
    files["big.bin"] = rnd.randbytes(20 << 20)  # more than two ranges
    files["empty.txt"] = b""
    return files


def tar_bytes(files, compress=""):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w" + (":" + compress if compress else ""),
                      format=tarfile.PAX_FORMAT) as t:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 1700000000
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zip_bytes(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in sorted(files.items()):
            z.writestr(name, data)
    return buf.getvalue()


def run(dsfs, args, env, timeout=120):
    t0 = time.monotonic()
    r = subprocess.run([dsfs] + args, env=env, capture_output=True, timeout=timeout)
    return r, time.monotonic() - t0


def reads_back(dsfs, store, files, env, label):
    r, _ = run(dsfs, ["ls", "-R", store], env)
    ok = r.returncode == 0
    for name, data in files.items():
        c = subprocess.run([dsfs, "cat", store, name], env=env, capture_output=True, timeout=60)
        if c.returncode != 0 or c.stdout != data:
            ok = False
            print("     %s: %s differs (%s)" % (label, name, c.stderr.decode().strip()))
    check(ok, "%s: every file reads back byte for byte" % label)


def one_line_error(r, words):
    lines = r.stderr.decode(errors="replace").strip().splitlines()
    return r.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words)


def child_max_rss_kib(dsfs, args, env):
    """The peak RSS of one `dsfs` run (a fresh child of a fresh Python)."""
    code = ("import resource,subprocess,sys;"
            "r=subprocess.run(sys.argv[1:],capture_output=True);"
            "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run(["/usr/bin/python3", "-c", code, dsfs] + args, env=env,
                         capture_output=True, text=True, timeout=120).stdout.split()
    return int(out[0]), int(out[1])


def ceph_case(dsfs):
    """Against Ceph RGW: an archive object and a prefix of 1100 objects (two listing pages)."""
    for b in ("/usr/bin/ceph-mon", "/usr/bin/ceph-osd", "/usr/bin/radosgw"):
        if not os.access(b, os.X_OK):
            print("SKIPPED: %s not installed" % b)
            return
    with tempfile.TemporaryDirectory(prefix="dsfs-packremote-ceph-") as tmp:
        cdir = os.path.join(tmp, "ceph")
        r = subprocess.run([CEPH, "start", cdir, str(os.getpid())], capture_output=True,
                           text=True, timeout=180)
        if r.returncode != 0:
            check(False, "Ceph starts: " + r.stderr.strip()[-300:])
            return
        f = dict(w.split("=", 1) for w in r.stdout.split() if "=" in w)
        try:
            env = dict(os.environ, AWS_ENDPOINT_URL=f["endpoint"], AWS_ACCESS_KEY_ID=f["access_key"],
                       AWS_SECRET_ACCESS_KEY=f["secret_key"], AWS_REGION="us-east-1",
                       AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
            env.pop("AWS_PROFILE", None)
            env.pop("AWS_SESSION_TOKEN", None)
            sign = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                    f["access_key"] + ":" + f["secret_key"], "-H",
                    "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-sf"]
            base = f["endpoint"] + "/dsfs-packsrc"
            subprocess.run(["curl"] + sign + ["-X", "PUT", base], check=True, timeout=30)
            rnd = random.Random(7)
            files = {"a/%04d.jpg" % i: rnd.randbytes(rnd.randrange(0, 300)) for i in range(1100)}
            files["big.bin"] = rnd.randbytes(9 << 20)
            src = os.path.join(tmp, "up")
            for name, data in files.items():
                p = os.path.join(src, name)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as fh:
                    fh.write(data)
            # One curl for all the uploads (its connection kept alive), to the prefix and a tar.
            cfg = os.path.join(tmp, "curl.cfg")
            with open(cfg, "w") as fh:
                for name in files:
                    fh.write('upload-file = "%s"\nurl = "%s/tree/%s"\n' %
                             (os.path.join(src, name), base, name))
            subprocess.run(["curl"] + sign + ["-K", cfg], check=True, timeout=300)
            with open(os.path.join(tmp, "tree.tar"), "wb") as fh:
                fh.write(tar_bytes(files))
            subprocess.run(["curl"] + sign + ["-T", os.path.join(tmp, "tree.tar"),
                                             base + "/tree.tar"], check=True, timeout=60)
            for label, url in (("ceph tar", "s3://dsfs-packsrc/tree.tar"),
                               ("ceph prefix", "s3://dsfs-packsrc/tree/")):
                store = os.path.join(tmp, label.replace(" ", "_") + ".dsfs")
                r, secs = run(dsfs, ["pack", url, store], env, timeout=300)
                check(r.returncode == 0 and b"packed 1101 files" in r.stdout,
                      "%s: pack %s (%.1f s): %s" % (label, url, secs,
                                                  (r.stdout + r.stderr).decode().strip()))
                if r.returncode == 0:
                    sample = {k: files[k] for k in ("a/0000.jpg", "a/1099.jpg", "big.bin")}
                    reads_back(dsfs, store, sample, env, label)
        finally:
            subprocess.run([CEPH, "stop", cdir], capture_output=True, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsfs", required=True)
    ap.add_argument("--ceph", action="store_true")
    args = ap.parse_args()
    dsfs = args.dsfs
    if args.ceph:
        ceph_case(dsfs)
        print("%d failure(s)" % len(FAILURES) if FAILURES else "all passed")
        return 1 if FAILURES else 0
    with tempfile.TemporaryDirectory(prefix="dsfs-packremote-") as tmp:
        state = os.path.join(tmp, "state")
        os.mkdir(state)
        s3 = S3(state)
        try:
            env = dict(os.environ, AWS_ENDPOINT_URL=s3.endpoint, AWS_ACCESS_KEY_ID="k",
                       AWS_SECRET_ACCESS_KEY="s", AWS_REGION="us-east-1",
                       AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
            env.pop("AWS_PROFILE", None)
            env.pop("AWS_SESSION_TOKEN", None)
            files = make_files()
            tar = tar_bytes(files)
            s3.put("/bkt")
            s3.put("/bkt/tree.tar", tar)
            s3.put("/bkt/tree.zip", zip_bytes(files))
            s3.put("/bkt/tree.tar.gz", tar_bytes(files, "gz"))
            s3.put("/bkt/trunc.tar", tar[:len(tar) // 2 + 100])
            s3.put("/bkt/longname.tar", tar_bytes({"d/" + "n" * 300000: b"x"}))
            for name, data in files.items():
                s3.put("/bkt/photos/" + name, data)
            s3.put("/bkt/photos/train/", b"")  # a directory marker: no file
            s3.put("/bkt/evil/ok.jpg", b"x")
            s3.put("/bkt/evil/a/../../escape.jpg", b"x")

            sources = [("s3 tar", "s3://bkt/tree.tar"), ("s3 zip", "s3://bkt/tree.zip"),
                       ("http tar.gz", s3.endpoint + "/bkt/tree.tar.gz"),
                       ("s3 prefix", "s3://bkt/photos/")]
            for label, src in sources:
                store = os.path.join(tmp, label.replace(" ", "_") + ".dsfs")
                r, secs = run(dsfs, ["pack", "-q", src, store], env)
                check(r.returncode == 0, "%s: pack %s (%.1f s) %s" % (label, src, secs,
                                                                     r.stderr.decode().strip()))
                if r.returncode == 0:
                    reads_back(dsfs, store, files, env, label)

            # https: a CA the system does not know is refused, then trusted by AWS_CA_BUNDLE.
            url, cert, tls = tls_server(tmp, {"/tree.zip": zip_bytes(files)})
            try:
                store = os.path.join(tmp, "https.dsfs")
                r, _ = run(dsfs, ["pack", "-q", "-f", url + "/tree.zip?sig=secret", store], env)
                check(one_line_error(r, ["certificate"]) and b"secret" not in r.stderr,
                      "https, unknown CA: one error line, no query shown: " +
                      r.stderr.decode().strip())
                r, _ = run(dsfs, ["pack", "-q", "-f", url + "/tree.zip", store],
                           dict(env, AWS_CA_BUNDLE=cert))
                check(r.returncode == 0, "https zip with AWS_CA_BUNDLE: packed " +
                      r.stderr.decode().strip())
                if r.returncode == 0:
                    reads_back(dsfs, store, files, env, "https zip")
            finally:
                tls.shutdown()

            # Memory: from s3 as from the same archive on the local disk.
            local_tar = os.path.join(tmp, "tree.tar")
            with open(local_tar, "wb") as f:
                f.write(tar)
            rc_l, rss_l = child_max_rss_kib(dsfs, ["pack", "-q", "-f", local_tar,
                                                   os.path.join(tmp, "m1.dsfs")], env)
            rc_r, rss_r = child_max_rss_kib(dsfs, ["pack", "-q", "-f", "s3://bkt/tree.tar",
                                                   os.path.join(tmp, "m2.dsfs")], env)
            print("     peak RSS: local %d KiB, s3 %d KiB" % (rss_l, rss_r))
            check(rc_l == 0 and rc_r == 0 and rss_r <= rss_l + 32 * 1024,
                  "s3 tar: peak RSS within 32 MiB of the local pack's (%d vs %d KiB)" %
                  (rss_r, rss_l))

            hostile = [
                ("s3 truncated", "s3://bkt/trunc.tar", ["trunc.tar", "runcated"]),
                ("http truncated", s3.endpoint + "/bkt/trunc.tar", ["trunc.tar", "runcated"]),
                ("huge name", "s3://bkt/longname.tar", ["name longer than"]),
                ("'..' key", "s3://bkt/evil/", ["unsafe key", "escape.jpg"]),
                ("missing object", "s3://bkt/nothing.tar", ["no such object"]),
                ("empty prefix", "s3://bkt/nothing/", ["no objects"]),
                ("http 404", s3.endpoint + "/bkt/nothing.tar", ["HTTP 404"]),
            ]
            for label, src, words in hostile:
                store = os.path.join(tmp, "bad.dsfs")
                r, secs = run(dsfs, ["pack", "-q", "-f", src, store], env)
                check(one_line_error(r, words), "%s: one error line (%.1f s): %s" %
                      (label, secs, r.stderr.decode(errors="replace").strip()[:300]))
            # Stalls: within the S3 commands' budget ($DSFS_S3_TIMEOUT_S, $DSFS_S3_ATTEMPTS).
            s3.mode("stall /bkt/tree.tar")
            quick = dict(env, DSFS_S3_TIMEOUT_S="2", DSFS_S3_ATTEMPTS="2")
            for label, src, words in (("http stall", s3.endpoint + "/bkt/tree.tar", ["stalled"]),
                                      ("s3 stall", "s3://bkt/tree.tar", ["tree.tar"])):
                r, secs = run(dsfs, ["pack", "-q", "-f", src, os.path.join(tmp, "bad.dsfs")],
                              quick, timeout=60)
                check(one_line_error(r, words) and secs < 30,
                      "%s: one error line in %.1f s: %s" % (label, secs,
                                                          r.stderr.decode().strip()))
            s3.mode("normal")
        finally:
            s3.stop()
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
