#!/usr/bin/python3
"""A dsfs mount in a small memory cgroup (issue 39 point 7): does the daemon live?

    sudo /usr/bin/python3 bench/memory_floor.py --limit 48M [--backend lmdb|s3] [--threads 2]
        [--passes 3] [--dsfs build/dsfs] [--work /tmp/dsfs-floor] [--extra -o,kernel]

Makes (once, under --work) a tree of small files (4-12 KB) and a few large ones, packs it (LMDB),
for s3 pushes it to a new bucket of the endpoint AWS_ENDPOINT_URL names (keys in AWS_*; e.g. a
gateway of tests/support/ceph_rgw.sh), then: a v1 memory cgroup dsfs-floor-PID with memory.limit_in_bytes
= LIMIT, drop_caches, `dsfs mount` started in it (default options, the disk cache on for s3), a
reader in it that reads every file PASSES times in shuffled order with THREADS threads and
checks its md5. Prints one line: limit, backend, threads, OOM kills (memory.oom_control), failed
reads, the cgroup's peak (memory.max_usage_in_bytes), the daemon's VmHWM and RssAnon, whether it
lived, what `dsfs mount` printed on stderr. Unmounts, removes the cgroup, whatever happened.
"""
import argparse, hashlib, os, random, shutil, signal, subprocess, sys, time

V1 = "/sys/fs/cgroup/memory"

MAKE_TREE = r'''
import hashlib, os, random, sys
out, manifest, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(39)
words = [''.join(rnd.choice('abcdefghijklmnop') for _ in range(rnd.randint(3, 9))) for _ in range(500)]
with open(manifest, 'w') as m:
    def put(rel, data):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as f:
            f.write(data)
        m.write(f"{rel} {hashlib.md5(data).hexdigest()}\n")
    for i in range(n):
        size = rnd.randint(4000, 12000)
        put(f"d{i % 40:02d}/f{i:06d}.txt",
            (f"{i} " + ' '.join(rnd.choice(words) for _ in range(size // 5)))[:size].encode())
    for i in range(4):
        put(f"large/l{i}.bin", rnd.randbytes(3 << 20))
'''

READER = r'''
import hashlib, random, sys, threading
mp, manifest, passes, nthreads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
want = dict(line.split() for line in open(manifest))
order = [p for k in range(passes) for p in random.Random(7 + k).sample(sorted(want), len(want))]
lock = threading.Lock()
st = {"reads": 0, "failed": 0, "errors": []}
def work(part):
    for rel in part:
        ok, err = False, ""
        try:
            with open(mp + "/" + rel, "rb") as f:
                ok = hashlib.md5(f.read()).hexdigest() == want[rel]
            err = "" if ok else "wrong bytes"
        except OSError as e:
            err = str(e)
        with lock:
            st["reads"] += 1
            if not ok:
                st["failed"] += 1
                if len(st["errors"]) < 3:
                    st["errors"].append(rel + ": " + err)
ts = [threading.Thread(target=work, args=(order[i::nthreads],)) for i in range(nthreads)]
for t in ts: t.start()
for t in ts: t.join()
print(f"reads={st['reads']} failed={st['failed']}", *st["errors"], sep="\n")
'''


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def kb(pid, key):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def oom_kills(cg):
    for line in open(cg + "/memory.oom_control"):
        k, v = line.split()
        if k == "oom_kill":
            return int(v)
    return -1


def inside(cg, argv):
    return ["sh", "-c", f"echo $$ > '{cg}/cgroup.procs' && exec " + " ".join(f"'{a}'" for a in argv)]


def prepare(args):
    os.makedirs(args.work, exist_ok=True)
    src, manifest, store = (os.path.join(args.work, x) for x in ("src", "manifest", "tree.dsfs"))
    if not os.path.exists(manifest):
        open(os.path.join(args.work, "make_tree.py"), "w").write(MAKE_TREE)
        subprocess.run([sys.executable, os.path.join(args.work, "make_tree.py"), src, manifest + ".new",
                        str(args.files)], check=True)
        os.rename(manifest + ".new", manifest)
    if not os.path.exists(store):
        subprocess.run([args.dsfs, "pack", "-q", "--backend", "lmdb", src, store + ".new"], check=True)
        os.rename(store + ".new", store)
    open(os.path.join(args.work, "reader.py"), "w").write(READER)
    return manifest, store


def push(args, store):
    bucket = f"floor{os.getpid()}"
    ep, key, secret = (os.environ[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                               "AWS_SECRET_ACCESS_KEY"))
    subprocess.run(["curl", "-sf", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3", "-H",
                    "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--user",
                    f"{key}:{secret}", f"{ep}/{bucket}"], check=True)
    url = f"s3://{bucket}/tree"
    subprocess.run([args.dsfs, "push", "-q", store, url], check=True)
    return url


def run(args):
    manifest, store = prepare(args)
    what = push(args, store) if args.backend == "s3" else store
    mp = os.path.join(args.work, "mnt")
    os.makedirs(mp, exist_ok=True)
    cache_dir = os.path.join(args.work, "cache")
    shutil.rmtree(cache_dir, ignore_errors=True)
    log = os.path.join(args.work, "daemon.log")
    cg = f"{V1}/dsfs-floor-{os.getpid()}"
    os.mkdir(cg)
    daemon = None
    try:
        open(cg + "/memory.limit_in_bytes", "w").write(str(args.limit))
        open("/proc/sys/vm/drop_caches", "w").write("3\n")
        argv = [args.dsfs, "mount", what, mp, "-o", "log_file=" + log]
        if args.backend == "s3":
            argv += ["-o", "cache_dir=" + cache_dir]
        argv += [a for a in args.extra.split(",") if a] if args.extra else []
        m = subprocess.run(inside(cg, argv), capture_output=True, text=True, timeout=120)
        if m.returncode != 0:
            print(f"mount failed ({m.returncode}): {m.stderr.strip()}")
            return 1
        procs = [int(p) for p in open(cg + "/cgroup.procs").read().split()]
        daemon = procs[0] if procs else None
        t0 = time.time()
        r = subprocess.run(inside(cg, [sys.executable, os.path.join(args.work, "reader.py"), mp,
                                       manifest, str(args.passes), str(args.threads)]),
                           capture_output=True, text=True, timeout=1200)
        secs = time.time() - t0
        first = (r.stdout.splitlines() or [f"reader=killed({r.returncode}) reads=? failed=?"])[0]
        alive = daemon is not None and kb(daemon, "VmHWM") >= 0
        peak = int(open(cg + "/memory.max_usage_in_bytes").read())
        print(f"limit={args.limit >> 20}M backend={args.backend} threads={args.threads} "
              f"oom_kill={oom_kills(cg)} {first} peak={peak / 1e6:.1f}MB "
              f"daemon_hwm={kb(daemon, 'VmHWM') / 1e3:.1f}MB anon={kb(daemon, 'RssAnon') / 1e3:.1f}MB "
              f"daemon={'alive' if alive else 'gone'} secs={secs:.1f} "
              f"stderr={m.stderr.strip()!r}")
        for line in r.stdout.splitlines()[1:]:
            print("  " + line)
        if args.stats and alive:
            st = subprocess.run([args.dsfs, "stats", "--json", mp], capture_output=True, text=True)
            print("  stats: " + st.stdout.strip())
            print("  oom_score_adj: " + open(f"/proc/{daemon}/oom_score_adj").read().strip())
            print("  smaps_rollup: " + " ".join(open(f"/proc/{daemon}/smaps_rollup").read().split()[2:]))
            maps, cur = [], None
            for line in open(f"/proc/{daemon}/smaps"):
                f = line.split()
                if "-" in f[0] and not f[0].endswith(":"):
                    lo, hi = (int(x, 16) for x in f[0].split("-"))
                    cur = [hi - lo, f[5] if len(f) > 5 else "", 0]
                    maps.append(cur)
                elif f[0] == "Anonymous:":
                    cur[2] = int(f[1])
            maps.sort(key=lambda m: -m[2])
            print("  anon maps (size kB, anon kB): " +
                  " ".join(f"{m[0] >> 10}/{m[2]}{m[1]}" for m in maps[:24]))
            tasks = os.listdir(f"/proc/{daemon}/task")
            names = {}
            for t in tasks:
                n = open(f"/proc/{daemon}/task/{t}/comm").read().strip()
                names[n] = names.get(n, 0) + 1
            print(f"  threads: {len(tasks)} {names}")
        return 0
    finally:
        subprocess.run([args.dsfs, "umount", mp], capture_output=True)
        subprocess.run(["umount", "-l", mp], capture_output=True)
        if daemon and kb(daemon, "VmHWM") >= 0:
            os.kill(daemon, signal.SIGKILL)
        for _ in range(100):
            for p in open(cg + "/cgroup.procs").read().split():
                open(V1 + "/cgroup.procs", "w").write(p)
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--limit", type=size, default=size("48M"))
    p.add_argument("--backend", choices=["lmdb", "s3"], default="lmdb")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--files", type=int, default=8000)
    p.add_argument("--dsfs", default="build/dsfs")
    p.add_argument("--work", default="/tmp/dsfs-floor")
    p.add_argument("--extra", default="")
    p.add_argument("--stats", action="store_true", help="print the daemon's stats after reading")
    args = p.parse_args()
    args.dsfs = os.path.abspath(args.dsfs)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
