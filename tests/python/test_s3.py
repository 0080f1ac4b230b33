"""An s3:// store: pushed to the Ceph gateway the tests start (tests/support/ceph_rgw.sh),
read through dsfs.Store with its disk cache, as a mount reads it. Skipped where Ceph is not
installed."""
import os
import shutil
import subprocess
import sys

import pytest

import dsfs
import dsfs.torch as dt
from conftest import REPO, dsfs_cli, pack

CEPH = os.path.join(REPO, "tests", "support", "ceph_rgw.sh")


@pytest.fixture(scope="module")
def gateway(session_dir):
    if shutil.which("radosgw") is None:
        pytest.skip("radosgw is not installed (scripts/setup.sh)")
    ceph_dir = str(session_dir / "ceph")
    r = subprocess.run([CEPH, "start", ceph_dir, str(os.getpid())], capture_output=True,
                       text=True, timeout=180)
    if r.returncode != 0:
        pytest.fail(f"Ceph did not start: {r.stderr.strip()}")
    fields = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                            "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ENDPOINT_URL=fields["endpoint"], AWS_ACCESS_KEY_ID=fields["access_key"],
                      AWS_SECRET_ACCESS_KEY=fields["secret_key"])
    subprocess.run(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                    f"{fields['access_key']}:{fields['secret_key']}", "-H",
                    "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT",
                    fields["endpoint"] + "/pytest"], check=True)
    try:
        yield fields
    finally:
        subprocess.run([CEPH, "stop", ceph_dir], capture_output=True, timeout=60)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_s3_store(gateway, small_store, session_dir):
    tree, db = small_store
    dsfs_cli("push", "-q", db, "s3://pytest/small")
    cache = session_dir / "s3-cache"
    store = dsfs.Store("s3://pytest/small", cache_dir=str(cache), cache_disk="64M")
    assert store.info()["remote"] and store.info()["backend"] == "s3"
    assert sorted(store.listdir()) == ["c0", "c1"]
    for c in ("c0", "c1"):
        for name in os.listdir(os.path.join(tree, c)):
            with open(os.path.join(tree, c, name), "rb") as f:
                assert store.read(f"{c}/{name}") == f.read()
    assert any(cache.iterdir()), "what was fetched is kept in the disk cache"
    ds = dt.ImageFolder(store)
    assert len(ds) == 24 and ds[3][0].size == (16, 16)
    with pytest.raises(FileNotFoundError):
        store.read("c0/none.jpg")
    with pytest.raises(OSError):
        dsfs.Store("s3://pytest/no-such-store", cache_dir=str(cache), s3_attempts=1)


# A child that reads the store through a relay run by a Python thread of its own: every byte
# from the gateway passes through that thread, so a read that held the GIL while it waited on
# the network could never finish (it fails within s3_timeout instead). Its keys come from a
# profile of a credentials file, not the environment (the chain, as for a mount).
RELAY_READER = r"""
import os, socket, sys, threading
import dsfs
host, port = sys.argv[1].rsplit("/", 1)[-1].rsplit(":", 1)
listener = socket.create_server(("127.0.0.1", 0))

def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        b.close()

def serve():
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection((host, int(port)))
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()

threading.Thread(target=serve, daemon=True).start()
os.environ["AWS_ENDPOINT_URL"] = "http://127.0.0.1:%d" % listener.getsockname()[1]
store = dsfs.Store("s3://pytest/small", cache_disk=0, s3_attempts=1, s3_timeout=10)
got = {}
def reader(k):
    for c in ("c0", "c1"):
        for name in store.listdir(c)[k::4]:
            got[c + "/" + name] = store.read(c + "/" + name)
threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(len(got), sum(map(len, got.values())))
"""


def test_reads_release_the_gil_and_keys_come_from_a_profile(gateway, small_store, session_dir):
    tree, db = small_store
    dsfs_cli("push", "-q", "--force", db, "s3://pytest/small")
    creds = session_dir / "aws-credentials"
    creds.write_text(f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n"
                     f"[bench]\naws_access_key_id = {gateway['access_key']}\n"
                     f"aws_secret_access_key = {gateway['secret_key']}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(session_dir / "none"),
               AWS_PROFILE="bench", AWS_REGION="us-east-1", HOME=str(session_dir))
    r = subprocess.run([sys.executable, "-c", RELAY_READER, gateway["endpoint"]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    sizes = [os.path.getsize(os.path.join(tree, c, n)) for c in ("c0", "c1")
             for n in os.listdir(os.path.join(tree, c))]
    assert r.stdout.split() == [str(len(sizes)), str(sum(sizes))]
