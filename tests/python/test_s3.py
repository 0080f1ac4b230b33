"""An s3:// store: pushed to the Ceph gateway the tests start (tests/support/ceph_rgw.sh),
read through dsfs.Store with its disk cache, as a mount reads it. Skipped where Ceph is not
installed."""
import os
import shutil
import subprocess

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
