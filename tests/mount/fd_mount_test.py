#!/usr/bin/python3
"""`dsfs mount STORE /dev/fd/N`: a mount made by a privileged parent, served by dsfs.

The helper below is what a CSI driver does (docs/containers.md): it opens /dev/fuse, mounts it
with mount(2) (type fuse.dsfs, fd=N), starts `dsfs mount STORE /dev/fd/N` with the descriptor
inherited, and closes its own copy. The tree is read back byte for byte, over the classic loop
and (where the fuse module allows it) over io_uring; the parent unmounts and the daemon must
exit; a SIGTERM to the daemon must end it and leave the parent's mount alone. And each
descriptor that cannot work is refused with one line: -o kernel, a closed number, a descriptor
that is not /dev/fuse, /dev/fuse not mounted yet, a name that is no number.

Usage: fd_mount_test.py --dsfs PATH. Needs root (mount(2)) and /dev/fuse; prints SKIPPED else.
"""
import argparse
import ctypes
import fcntl
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

LIBC = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4
MNT_DETACH = 2
ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


# --- the privileged parent -------------------------------------------------------------------

def open_and_mount(mnt):
    """Opens /dev/fuse and mounts it at `mnt` as libfuse's fusermount3 would; returns the fd."""
    fd = os.open("/dev/fuse", os.O_RDWR)  # not O_CLOEXEC: the server inherits it
    opts = "fd=%d,rootmode=40000,user_id=0,group_id=0" % fd
    rc = LIBC.mount(b"dsfs-fd-test", mnt.encode(), b"fuse.dsfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                    opts.encode())
    if rc != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, "mount(2) of /dev/fuse at %s: %s" % (mnt, os.strerror(err)))
    return fd


def unmount(mnt, flags=0):
    return LIBC.umount2(mnt.encode(), flags) == 0


def mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def connection_of(fd):
    with open("/proc/self/fdinfo/%d" % fd) as f:
        for line in f:
            if line.startswith("fuse_connection:"):
                return int(line.split()[1])
    return 0


def servers_of(connection):
    """PIDs (not this one) holding a /dev/fuse descriptor of FUSE connection `connection`."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) != "/dev/fuse":
                    continue
                with open("/proc/%s/fdinfo/%s" % (pid, fd)) as f:
                    if "fuse_connection:\t%d\n" % connection in f.read():
                        pids.append(int(pid))
                        break
        except OSError:
            continue
    return pids


def wait_gone(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not os.path.exists("/proc/%d" % pid):
            return True
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(") ")[-1].startswith("Z"):
                    return True  # exited; its reaper has not waited yet
        except OSError:
            return True
        time.sleep(0.05)
    return False


# --- the tree --------------------------------------------------------------------------------

def make_tree(src):
    rnd = random.Random(43)
    os.makedirs(os.path.join(src, "train", "cat"))
    os.makedirs(os.path.join(src, "empty"))
    for i in range(20):
        with open(os.path.join(src, "train", "cat", "%03d.jpg" % i), "wb") as f:
            f.write(rnd.randbytes(rnd.randrange(0, 300000)))
    with open(os.path.join(src, "big.bin"), "wb") as f:
        f.write(rnd.randbytes(5 << 20))
    os.symlink("train/cat/000.jpg", os.path.join(src, "first"))


def snapshot(root):
    out = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(d, root)
        out[rel] = ("dir",)
        for name in sorted(files):
            p = os.path.join(d, name)
            key = os.path.normpath(os.path.join(rel, name))
            if os.path.islink(p):
                out[key] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[key] = ("file", os.stat(p).st_mode & 0o7777, f.read())
        for name in dirs:
            p = os.path.join(d, name)
            if os.path.islink(p):
                out[os.path.normpath(os.path.join(rel, name))] = ("link", os.readlink(p))
    return out


# --- the cases -------------------------------------------------------------------------------

def serve_and_read(dsfs, store, mnt, want, extra, label, dsfs_umount=False):
    """Background `dsfs mount STORE /dev/fd/N`, the tree read back, the parent's unmount
    (umount2, or `dsfs umount DIR`, which waits for the daemon)."""
    fd = open_and_mount(mnt)
    try:
        conn = connection_of(fd)
        r = subprocess.run([dsfs, "mount", store, "/dev/fd/%d" % fd] + extra, pass_fds=(fd,),
                           capture_output=True, text=True, timeout=60)
        os.close(fd)  # the parent's copy: from now on the daemon's is the only one
        fd = -1
        check(r.returncode == 0, "%s: dsfs mount returns 0 (%s)" % (label, r.stderr.strip()))
        daemons = servers_of(conn)
        check(len(daemons) == 1, "%s: one daemon serves the descriptor (%s)" % (label, daemons))
        check(snapshot(mnt) == want, "%s: the tree reads back byte for byte" % label)
        st = subprocess.run([dsfs, "stats", "--json", mnt], capture_output=True, text=True,
                            timeout=30)
        serving = ""
        if st.returncode == 0:
            import json
            serving = json.loads(st.stdout).get("transport", {}).get("serving", "")
        check(st.returncode == 0, "%s: dsfs stats answers (%s)" % (label, serving))
        if dsfs_umount:
            u = subprocess.run([dsfs, "umount", mnt], capture_output=True, text=True, timeout=30)
            check(u.returncode == 0, "%s: dsfs umount of the parent's mount (%s)" %
                  (label, u.stderr.strip()))
        else:
            check(unmount(mnt), "%s: the parent unmounts" % label)
        for pid in daemons:
            check(wait_gone(pid, 10), "%s: daemon %d exits after the parent's unmount" % (label, pid))
        return serving
    finally:
        if fd >= 0:
            os.close(fd)
        if mounted(mnt):
            unmount(mnt, MNT_DETACH)


def sigterm_leaves_mount(dsfs, store, mnt, want):
    """Foreground server: SIGTERM ends it (exit 0) and the mount stays the parent's."""
    fd = open_and_mount(mnt)
    proc = None
    try:
        proc = subprocess.Popen([dsfs, "mount", "-f", store, "/dev/fd/%d" % fd], pass_fds=(fd,),
                                stderr=subprocess.PIPE, text=True)
        os.close(fd)
        fd = -1
        deadline = time.monotonic() + 30
        ok = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(os.path.join(mnt, "big.bin"), "rb") as f:
                    ok = f.read() == want["big.bin"][2]
                break
            except OSError:
                time.sleep(0.05)
        check(ok, "foreground: a file reads back")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=15)
        check(rc == 0, "foreground: SIGTERM ends the server with 0 (%s)" % proc.stderr.read().strip())
        check(mounted(mnt), "foreground: the parent's mount is left for the parent")
        try:
            os.statvfs(mnt)  # never answered from the kernel's caches
            dead = False
        except OSError:
            dead = True
        check(dead, "foreground: the mount is dead once its only descriptor is closed")
        check(unmount(mnt), "foreground: the parent unmounts the dead mount")
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        if fd >= 0:
            os.close(fd)
        if mounted(mnt):
            unmount(mnt, MNT_DETACH)


def one_line_error(r, words):
    lines = r.stderr.strip().splitlines()
    return r.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words)


def refusals(dsfs, store, tmp, mnt):
    def run(target, extra=(), fds=()):
        return subprocess.run([dsfs, "mount", store, target] + list(extra), pass_fds=fds,
                              capture_output=True, text=True, timeout=30)

    fd = open_and_mount(mnt)
    try:
        r = run("/dev/fd/%d" % fd, ["-o", "kernel"], (fd,))
        check(one_line_error(r, ["kernel", "descriptor"]), "-o kernel refused: " + r.stderr.strip())
        check(servers_of(connection_of(fd)) == [], "-o kernel: no daemon left")
    finally:
        os.close(fd)
        unmount(mnt, MNT_DETACH)
    r = run("/dev/fd/87")
    check(one_line_error(r, ["/dev/fd/87", "not open"]), "closed fd refused: " + r.stderr.strip())
    with open(os.path.join(tmp, "plain"), "w") as f:
        r = run("/dev/fd/%d" % f.fileno(), fds=(f.fileno(),))
    check(one_line_error(r, ["not /dev/fuse"]), "a file's fd refused: " + r.stderr.strip())
    unmounted = os.open("/dev/fuse", os.O_RDWR)
    try:
        r = run("/dev/fd/%d" % unmounted, fds=(unmounted,))
    finally:
        os.close(unmounted)
    check(one_line_error(r, ["not mounted"]), "an unmounted /dev/fuse refused: " + r.stderr.strip())
    r = run("/dev/fd/0")
    check(one_line_error(r, ["standard stream"]), "/dev/fd/0 refused: " + r.stderr.strip())
    r = run("/dev/fd/x3")
    check(one_line_error(r, ["not a descriptor number"]), "/dev/fd/x3 refused: " + r.stderr.strip())
    r = subprocess.run([dsfs, "umount", "/dev/fd/3"], capture_output=True, text=True, timeout=30)
    check(one_line_error(r, ["descriptor", "parent"]), "dsfs umount /dev/fd/3 refused: " +
          r.stderr.strip())


def uring_case(dsfs, store, mnt, want):
    """The same over io_uring, with the module parameter set for the case and put back."""
    try:
        with open(ENABLE_URING) as f:
            saved = f.read().strip()
        with open(ENABLE_URING, "w") as f:
            f.write("Y")
    except OSError as e:
        print("skip io_uring: %s: %s" % (ENABLE_URING, e))
        return
    try:
        serving = serve_and_read(dsfs, store, mnt, want, ["-o", "transport=uring"], "uring",
                                 dsfs_umount=True)
        check(serving.startswith("uring"), "uring: io_uring serves (%s)" % serving)
    finally:
        with open(ENABLE_URING, "w") as f:
            f.write(saved)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsfs", required=True)
    args = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("SKIPPED: needs root and /dev/fuse")
        return 0
    with tempfile.TemporaryDirectory(prefix="dsfs-fdmount-") as tmp:
        src, store, mnt = (os.path.join(tmp, n) for n in ("src", "tree.dsfs", "mnt"))
        make_tree(src)
        os.mkdir(mnt)
        subprocess.run([args.dsfs, "pack", "-q", src, store], check=True, timeout=120)
        want = snapshot(src)
        serving = serve_and_read(args.dsfs, store, mnt, want, ["-o", "transport=classic"],
                                 "classic")
        check(serving.startswith("classic"), "classic: the classic loop serves (%s)" % serving)
        sigterm_leaves_mount(args.dsfs, store, mnt, want)
        refusals(args.dsfs, store, tmp, mnt)
        uring_case(args.dsfs, store, mnt, want)
        check(not mounted(mnt), "nothing left mounted")
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
