#!/usr/bin/python3
"""AWS credential services and an S3 that checks signatures, on 127.0.0.1, for dsfs's tests.

One HTTP(S) server speaks, by path:
  POST /                                   STS: AssumeRoleWithWebIdentity (unsigned; the
                                           WebIdentityToken must equal STATE/web_token) and
                                           AssumeRole (SigV4 for sts, by a key issued here or
                                           the root key); XML answers as STS gives them
  GET  /container/creds                    the ECS/EKS container endpoint (the Authorization
                                           header must equal STATE/container_token if present)
  PUT  /latest/api/token                   IMDSv2 session token (needs the TTL header)
  GET  /latest/meta-data/iam/security-credentials/[ROLE]   IMDSv2 (needs the session token)
  anything else                            S3 (tests/support/hostile_s3.py's in-memory store),
                                           path style, or virtual-hosted when the Host header
                                           is BUCKET.localhost:PORT; every request must carry a
                                           valid SigV4 signature by a known, unexpired key with
                                           its session token (400 ExpiredToken past its
                                           expiry, 403 otherwise), except GETs and HEADs of
                                           buckets named public-*, which may be unsigned
Issued credentials live STATE/lifetime seconds (default 3600), read at each issue (and are
refused STATE/revoke_early seconds before that, default 0); STATE/expiration, if it exists, is
the Expiration announced instead (a source whose clock is behind). If STATE/sts_fail exists
every credential service answers 503; STATE/sts_status is the HTTP status of STS's answers
that carry credentials (default 200); STATE/imds_role is the role name IMDS gives (default
dsfs-role). The root key (long-term):
AKIDROOTDSFS / rootsecretDSFS. STATE/issued gets one line per issue ("SOURCE ACCESS_KEY_ID")
STATE/secrets their secrets and tokens (one a line, for the tests that look for leaks),
and STATE/s3 one per S3 request ("METHOD PATH KEY_ID|anonymous STATUS").

Usage: aws_services.py STATE_DIR WATCH_PID [--tls CERT KEY]: prints
"endpoint=http(s)://127.0.0.1:PORT" once it listens; exits when WATCH_PID is gone.
"""
import datetime
import hashlib
import hmac
import json
import os
import re
import secrets
import ssl
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_s3  # noqa: E402  (reads STATE from sys.argv[1] as we do)

STATE = sys.argv[1]
ROOT_KEY, ROOT_SECRET = "AKIDROOTDSFS", "rootsecretDSFS"
KEYS = {ROOT_KEY: (ROOT_SECRET, "", 0)}  # access key id -> (secret, token, expires unix s)
IMDS_TOKENS = set()
LOCK = threading.Lock()
COUNTER = [0]


def state_text(name, default=None):
    try:
        with open(os.path.join(STATE, name)) as f:
            return f.read().strip()
    except OSError:
        return default


def append(name, line):
    with open(os.path.join(STATE, name), "a") as f:
        f.write(line + "\n")


def issue(source):
    lifetime = int(state_text("lifetime", "3600"))
    with LOCK:
        COUNTER[0] += 1
        akid = f"ASIADSFS{COUNTER[0]:08d}"
        secret = "sec" + secrets.token_hex(16)
        token = "tok" + secrets.token_hex(24)
        expires = time.time() + lifetime
        # STATE/revoke_early: the server stops honouring the keys that many seconds before the
        # Expiration it announces (what a revoked session looks like to the client).
        KEYS[akid] = (secret, token, expires - int(state_text("revoke_early", "0")))
    append("issued", f"{source} {akid}")
    append("secrets", f"{secret}\n{token}")
    stamp = datetime.datetime.fromtimestamp(expires, datetime.timezone.utc)
    return akid, secret, token, state_text("expiration", stamp.strftime("%Y-%m-%dT%H:%M:%SZ"))


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def check_sigv4(handler, body):
    """(key id, None) if signed correctly; (None, None) if unsigned; (x, (status, code)) else."""
    auth = handler.headers.get("Authorization")
    if not auth:
        return None, None
    m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,"
                 r" ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$", auth)
    if not m:
        return "?", (400, "AuthorizationHeaderMalformed")
    akid, date, region, service, signed, signature = m.groups()
    with LOCK:
        key = KEYS.get(akid)
    if key is None:
        return akid, (403, "InvalidAccessKeyId")
    secret, token, expires = key
    if expires and time.time() > expires:
        return akid, (400, "ExpiredToken")
    if handler.headers.get("x-amz-security-token", "") != token:
        return akid, (403, "InvalidToken")
    url = urllib.parse.urlsplit(handler.path)
    pairs = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
    query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                     for k, v in sorted(pairs))
    names = signed.split(";")
    headers = "".join(f"{n}:{' '.join(handler.headers.get(n, '').split())}\n" for n in names)
    payload = handler.headers.get("x-amz-content-sha256") or sha256(body)
    creq = "\n".join([handler.command, url.path or "/", query, headers, signed, payload])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", handler.headers.get("x-amz-date", ""), scope,
                         sha256(creq.encode())])
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    want = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, signature):
        return akid, (403, "SignatureDoesNotMatch")
    return akid, None


def error_xml(code):
    return f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>refused</Message></Error>"


class Handler(hostile_s3.Handler):
    def sts(self):
        body = self.body()
        form = dict(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
        action = form.get("Action")
        if state_text("sts_fail") is not None:
            return self.answer(503, error_xml("ServiceUnavailable").encode())
        if action == "AssumeRoleWithWebIdentity":
            if self.headers.get("Authorization"):
                return self.answer(400, error_xml("UnexpectedSignature").encode())
            if form.get("WebIdentityToken") != state_text("web_token") or \
                    not form.get("RoleArn", "").startswith("arn:aws:iam::") or \
                    not form.get("RoleSessionName"):
                return self.answer(403, error_xml("AccessDenied").encode())
            source = "web-identity"
        elif action == "AssumeRole":
            akid, err = check_sigv4(self, body)
            if akid is None or err is not None:
                code = err[1] if err else "MissingAuthenticationToken"
                return self.answer(403, error_xml(code).encode())
            if not form.get("RoleArn", "").startswith("arn:aws:iam::"):
                return self.answer(400, error_xml("ValidationError").encode())
            source = "assume-role"
        else:
            return self.answer(400, error_xml("InvalidAction").encode())
        akid, secret, token, exp = issue(source)
        xml = (f"<{action}Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
               f"<{action}Result><Credentials><SessionToken>{token}</SessionToken>"
               f"<SecretAccessKey>{secret}</SecretAccessKey><Expiration>{exp}</Expiration>"
               f"<AccessKeyId>{akid}</AccessKeyId></Credentials></{action}Result>"
               f"<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></{action}Response>")
        self.answer(int(state_text("sts_status", "200")), xml.encode(),
                    {"Content-Type": "text/xml"})

    def credentials_json(self, source, imds):
        if state_text("sts_fail") is not None:
            return self.answer(503, b"unavailable")
        akid, secret, token, exp = issue(source)
        doc = {"AccessKeyId": akid, "SecretAccessKey": secret, "Token": token, "Expiration": exp}
        if imds:
            doc.update({"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": exp})
        else:
            doc["RoleArn"] = "arn:aws:iam::123456789012:role/dsfs"
        self.answer(200, json.dumps(doc).encode(), {"Content-Type": "application/json"})

    def special(self):
        """Answers a credential service's request; False if it is an S3 request."""
        path = urllib.parse.urlsplit(self.path).path
        if self.command == "POST" and path == "/":
            self.sts()
            return True
        if self.command == "GET" and path == "/container/creds":
            want = state_text("container_token")
            if want is not None and self.headers.get("Authorization") != want:
                self.answer(401, b"unauthorized")
                return True
            self.credentials_json("container", False)
            return True
        if path == "/latest/api/token" and self.command == "PUT":
            self.body()
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                self.answer(400, b"missing ttl")
                return True
            token = "imds" + secrets.token_hex(16)
            with LOCK:
                IMDS_TOKENS.add(token)
            self.answer(200, token.encode())
            return True
        if path.startswith("/latest/meta-data/"):
            with LOCK:
                ok = self.headers.get("X-aws-ec2-metadata-token") in IMDS_TOKENS
            if not ok:
                self.answer(401, b"")
            elif path == "/latest/meta-data/iam/security-credentials/":
                self.answer(200, state_text("imds_role", "dsfs-role").encode())
            elif path == "/latest/meta-data/iam/security-credentials/dsfs-role":
                self.credentials_json("imds", True)
            else:
                self.answer(404, b"")
            return True
        return False

    def s3(self, method):
        host = self.headers.get("Host", "")
        virtual = re.match(r"([a-z0-9.-]+)\.localhost(:\d+)?$", host)
        akid, err = check_sigv4(self, b"")  # over the path as sent
        if virtual:  # BUCKET.localhost: the bucket goes back in the path for the store
            self.path = "/" + virtual.group(1) + self.path
        bucket = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        bucket = bucket.split("/", 1)[0]
        if akid is None and not (self.command in ("GET", "HEAD") and bucket.startswith("public-")):
            err = (403, "AccessDenied")
        append("s3", f"{self.command} {self.path} {akid or 'anonymous'} "
               f"{err[0] if err else 200}{' virtual' if virtual else ''}")
        if err:
            self.body()
            return self.answer(err[0], error_xml(err[1]).encode(),
                               {"Content-Type": "application/xml"})
        method(self)

    def do_GET(self):
        if not self.special():
            self.s3(hostile_s3.Handler.do_GET)

    def do_HEAD(self):
        self.s3(hostile_s3.Handler.do_HEAD)

    def do_PUT(self):
        if not self.special():
            self.s3(hostile_s3.Handler.do_PUT)

    def do_POST(self):
        if not self.special():
            self.s3(hostile_s3.Handler.do_POST)

    def do_DELETE(self):
        self.s3(hostile_s3.Handler.do_DELETE)


def main():
    server = hostile_s3.Server(("127.0.0.1", 0), Handler)
    scheme = "http"
    if "--tls" in sys.argv:
        i = sys.argv.index("--tls")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[i + 1], sys.argv[i + 2])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    print(f"endpoint={scheme}://127.0.0.1:{server.server_address[1]}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hostile_s3.watch_parent(int(sys.argv[2]) if len(sys.argv) > 2 else 0)


if __name__ == "__main__":
    main()
