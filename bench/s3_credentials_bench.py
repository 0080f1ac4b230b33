#!/usr/bin/python3
"""Reads through a mount whose S3 keys expire every 30 s (issue 32's target): zero failed reads.

A store is pushed (long-term keys) to tests/support/aws_services.py on 127.0.0.1, an S3 that
checks every request's SigV4 signature and refuses expired keys, beside an STS. It is mounted
with keys from web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN -> STS
AssumeRoleWithWebIdentity) that live --lifetime seconds; then a loop reads every file for
--seconds, dropping each file's pages after reading (posix_fadvise DONTNEED) and with a RAM
cache far smaller than the files, so reads keep reaching S3. Counted: reads and failed reads,
S3 requests by answer (the server's log), keys issued, and whether any secret appears in the
mount's debug log or its stats.

  sudo bench/s3_credentials_bench.py [--build build] [--seconds 300] [--lifetime 30]

Writes bench/results/credentials/credentials-DATE-TIME.{md,jsonl}. Needs root (a mount).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import REPO, Mount, results_dir, sh  # noqa: E402

ROOT_KEY, ROOT_SECRET = "AKIDROOTDSFS", "rootsecretDSFS"
ROLE = "arn:aws:iam::123456789012:role/dsfs-bench"
TOKEN = "eyJ-bench-web-identity-token"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--lifetime", type=int, default=30)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--file-bytes", type=int, default=256 << 10)
    args = ap.parse_args()
    dsfs = os.path.join(args.build, "dsfs")
    work = tempfile.mkdtemp(prefix="dsfs-creds-bench-")
    state = os.path.join(work, "state")
    os.makedirs(state)
    with open(os.path.join(state, "web_token"), "w") as f:
        f.write(TOKEN)
    with open(os.path.join(state, "lifetime"), "w") as f:
        f.write(str(args.lifetime))
    server = subprocess.Popen(
        ["/usr/bin/python3", os.path.join(REPO, "tests", "support", "aws_services.py"), state,
         str(os.getpid())], stdout=subprocess.PIPE, text=True)
    try:
        endpoint = server.stdout.readline().strip().split("=", 1)[1]
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        base.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_STS": endpoint,
                     "AWS_EC2_METADATA_DISABLED": "true",
                     "AWS_CONFIG_FILE": os.path.join(work, "none"),
                     "AWS_SHARED_CREDENTIALS_FILE": os.path.join(work, "none")})
        src = os.path.join(work, "src")
        for i in range(args.files):
            d = os.path.join(src, f"d{i % 10}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"f{i}.bin"), "wb") as f:
                f.write(os.urandom(args.file_bytes))
        store = os.path.join(work, "store.db")
        r = sh([dsfs, "pack", "-q", "--backend", "lmdb", src, store])
        assert r.returncode == 0, r.stderr
        root = dict(base, AWS_ACCESS_KEY_ID=ROOT_KEY, AWS_SECRET_ACCESS_KEY=ROOT_SECRET)
        r = sh([dsfs, "push", "-q", store, "s3://bench/s"], env=root)
        assert r.returncode == 0, r.stderr
        token_file = os.path.join(work, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN)
        web = dict(base, AWS_WEB_IDENTITY_TOKEN_FILE=token_file, AWS_ROLE_ARN=ROLE)
        mnt, log = os.path.join(work, "mnt"), os.path.join(work, "mount.log")
        files = sorted(os.path.relpath(os.path.join(dp, n), src)
                       for dp, _, ns in os.walk(src) for n in ns)
        expected = {f: open(os.path.join(src, f), "rb").read() for f in files}
        os.environ.clear()
        os.environ.update(web)  # Mount runs dsfs with this process's environment
        reads = failures = 0
        first_error = ""
        start = time.monotonic()
        with Mount(dsfs, "s3://bench/s", mnt,
                   ["-o", f"cache_disk=0,cache_size=1M,log_level=debug,log_file={log}"]) as m:
            while time.monotonic() - start < args.seconds:
                for f in files:
                    path = os.path.join(mnt, f)
                    try:
                        fd = os.open(path, os.O_RDONLY)
                        try:
                            data = b""
                            while True:
                                chunk = os.read(fd, 1 << 20)
                                if not chunk:
                                    break
                                data += chunk
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        finally:
                            os.close(fd)
                        ok = data == expected[f]
                    except OSError as e:
                        ok = False
                        first_error = first_error or f"{f}: {e}"
                    reads += 1
                    if not ok:
                        failures += 1
                    if time.monotonic() - start >= args.seconds:
                        break
            stats_text = json.dumps(m.stats())
        elapsed = time.monotonic() - start
        with open(os.path.join(state, "s3")) as f:
            s3_lines = f.read().splitlines()
        by_status = {}
        for line in s3_lines:
            status = line.split()[3]
            by_status[status] = by_status.get(status, 0) + 1
        with open(os.path.join(state, "issued")) as f:
            issued = [line.split()[0] for line in f.read().splitlines()]
        with open(os.path.join(state, "secrets")) as f:
            secrets = [s for s in f.read().splitlines() if s] + [ROOT_SECRET, TOKEN]
        log_text = open(log).read() if os.path.exists(log) else ""
        leaked = sum(1 for s in secrets if s in log_text or s in stats_text)
        result = {"seconds": round(elapsed, 1), "lifetime_s": args.lifetime,
                  "files": len(files), "file_bytes": args.file_bytes, "reads": reads,
                  "failed_reads": failures, "first_error": first_error,
                  "s3_requests": len(s3_lines), "s3_by_status": by_status,
                  "keys_issued_web_identity": issued.count("web-identity"),
                  "refresh_failed_logged": log_text.count("refresh failed"),
                  "secrets_checked": len(secrets), "secrets_leaked": leaked}
    finally:
        server.kill()
        server.wait()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = results_dir("credentials")
    with open(os.path.join(out, f"credentials-{stamp}.jsonl"), "w") as f:
        f.write(json.dumps(result) + "\n")
    md = f"""# S3 keys expiring every {args.lifetime} s under a {args.seconds} s read loop ({stamp})

`bench/s3_credentials_bench.py --seconds {args.seconds} --lifetime {args.lifetime}`: a store of
{len(files)} files of {args.file_bytes} bytes pushed to `tests/support/aws_services.py`
(127.0.0.1, SigV4 checked, expired keys refused with `ExpiredToken`), mounted with keys from
web identity (STS AssumeRoleWithWebIdentity) living {args.lifetime} s, `cache_disk=0,cache_size=1M`;
every file read in turn and its pages dropped, for {result['seconds']} s.

| reads | failed reads | S3 requests | by answer | web identity keys issued | secrets in log or stats |
|---|---|---|---|---|---|
| {reads} | {failures} | {len(s3_lines)} | {', '.join(f'{k}: {v}' for k, v in sorted(by_status.items()))} | {result['keys_issued_web_identity']} | {leaked} of {len(secrets)} |

{('First error: ' + first_error) if first_error else 'No read failed.'}
"""
    with open(os.path.join(out, f"credentials-{stamp}.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if failures == 0 and leaked == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
