"""What the S3 benchmarks share (bench/s3_bench.py, bench/warmup_bench.py): a single-host Ceph
cluster (tests/support/ceph_rgw.sh, 127.0.0.1, memstore) started and stopped by the script, a
bucket on it, and another node: a network namespace whose mounts reach the gateway through
tests/support/netns_proxy.py, a delay away each way (`tc netem` where the kernel has sch_netem,
else the relay's own delay line). Imported, not run.
"""
import os
import subprocess
import time

from bench_util import PY, REPO, Mount, sh

CEPH_SCRIPT = os.path.join(REPO, "tests", "support", "ceph_rgw.sh")


def start_ceph(ceph_dir):
    """Starts the cluster in `ceph_dir` (stopped by stop_ceph, or by its watchdog once this
    process is gone) and points this process's AWS_* variables at it (the mounts' daemons
    inherit them). Returns (its endpoint, access_key and secret_key fields, seconds to start);
    RuntimeError if it did not start."""
    t0 = time.monotonic()
    r = sh([CEPH_SCRIPT, "start", ceph_dir, str(os.getpid())], timeout=180)
    start_s = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"Ceph did not start: {r.stderr.strip()}")
    fields = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    os.environ.update(AWS_ENDPOINT_URL=fields["endpoint"], AWS_ACCESS_KEY_ID=fields["access_key"],
                      AWS_SECRET_ACCESS_KEY=fields["secret_key"])
    return fields, start_s


def stop_ceph(ceph_dir):
    sh([CEPH_SCRIPT, "stop", ceph_dir], timeout=60)


def create_bucket(fields, bucket):
    subprocess.run(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                    f"{fields['access_key']}:{fields['secret_key']}", "-H",
                    "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT",
                    fields["endpoint"] + "/" + bucket], check=True, stdout=subprocess.DEVNULL)


def timed(argv, env=None):
    """Runs argv; (seconds, the CompletedProcess); RuntimeError if it failed."""
    t0 = time.monotonic()
    r = sh(argv, env=env, timeout=3600)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()[-500:]}")
    return dt, r


class Node:
    """A network namespace (another node) whose 127.0.0.1:8000 relays to the gateway's port,
    `delay_ms` away each way. Removed, and the relay ended by PID, on exit."""

    def __init__(self, gateway_port, delay_ms):
        self.name = f"dsfs-s3b-{os.getpid()}"
        self.port, self.delay_ms, self.proxy, self.made = gateway_port, delay_ms, None, False
        self.how = ""

    def __enter__(self):
        r = sh(["ip", "netns", "add", self.name])
        if r.returncode != 0:
            raise RuntimeError(f"ip netns add: {r.stderr.strip()}")
        self.made = True
        sh(["ip", "-n", self.name, "link", "set", "lo", "up"])
        r = sh(["tc", "-n", self.name, "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                f"{self.delay_ms}ms"])
        netem = r.returncode == 0
        self.how = (f"tc netem delay {self.delay_ms} ms on the node's loopback" if netem else
                    f"the relay's delay line, {self.delay_ms} ms each way (this kernel has no "
                    "sch_netem)")
        self.proxy = subprocess.Popen(
            [PY, os.path.join(REPO, "tests", "support", "netns_proxy.py"), self.name, "8000", str(self.port),
             "0" if netem else str(self.delay_ms)], stdout=subprocess.PIPE, text=True)
        if self.proxy.stdout.readline().strip() != "ready":
            raise RuntimeError("netns_proxy.py did not start")
        return self

    def argv(self, argv):
        """`argv` run on the node (its S3 requests through the relay)."""
        return ["nsenter", f"--net=/run/netns/{self.name}", "env",
                "AWS_ENDPOINT_URL=http://127.0.0.1:8000", *argv]

    def mount(self, dsfs, source, mnt, opts):
        """`dsfs mount` inside the namespace (its daemon stays there)."""
        os.makedirs(mnt, exist_ok=True)
        r = sh(["nsenter", f"--net=/run/netns/{self.name}", "env",
                "AWS_ENDPOINT_URL=http://127.0.0.1:8000", dsfs, "mount", source, mnt, *opts])
        if r.returncode != 0:
            raise RuntimeError(f"dsfs mount {source} in {self.name}: {r.stderr.strip()}")

    def __exit__(self, *exc):
        if self.proxy:
            self.proxy.kill()
            self.proxy.wait()
        if self.made:
            sh(["ip", "netns", "del", self.name])
        return False


class NodeMount(Mount):
    """A Mount whose daemon runs on `node` (unmounted from here, as any mount)."""

    def __init__(self, node, *args):
        super().__init__(*args)
        self.node = node

    def __enter__(self):
        self.node.mount(self.dsfs, self.store, self.mnt, self.opts)
        return self
