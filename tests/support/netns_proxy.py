#!/usr/bin/python3
"""A TCP relay from inside a network namespace to a port of this one, for the S3 tests and
bench/s3_bench.py.

  netns_proxy.py NETNS LISTEN_PORT TARGET_PORT [DELAY_MS]

Listens on 127.0.0.1:LISTEN_PORT inside network namespace NETNS (/run/netns/NETNS, made by the
caller) and relays every connection to 127.0.0.1:TARGET_PORT of the namespace it was started in
(the gateway). A client in NETNS then reaches the gateway through NETNS's loopback: the network
between nodes, without an address outside namespaces the caller made.

DELAY_MS (default 0): every byte is passed on DELAY_MS milliseconds after it arrived, in each
direction, as `tc netem delay` on the namespace's loopback would (a delay line: what arrives
meanwhile is not held up behind it, so the delay costs latency, not bandwidth). It stands in for
netem where the kernel has none (CONFIG_NET_SCH_NETEM unset). Prints "ready" once listening;
runs until killed.
"""
import collections
import ctypes
import os
import socket
import sys
import threading
import time

CLONE_NEWNET = 0x40000000


def setns(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def close_both(src, dst):
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pump(src, dst, delay_s):
    """Copies src to dst until src ends, each chunk `delay_s` after it was read."""
    if delay_s <= 0:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        close_both(src, dst)
        return
    line = collections.deque()  # (when to send, bytes; b"" = the end)
    ready = threading.Condition()

    def send():
        while True:
            with ready:
                while not line:
                    ready.wait()
                due, data = line.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        close_both(src, dst)

    threading.Thread(target=send, daemon=True).start()
    while True:
        try:
            data = src.recv(1 << 16)
        except OSError:
            data = b""
        with ready:
            line.append((time.monotonic() + delay_s, data))
            ready.notify()
        if not data:
            return


def main():
    netns, listen_port, target_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    delay_s = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.0
    home = f"/proc/self/task/{threading.get_native_id()}/ns/net"
    home_fd = os.open(home, os.O_RDONLY)
    setns(f"/run/netns/{netns}")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(128)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(home_fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns back")
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", target_port))
        except OSError:
            client.close()  # the gateway is down: the client sees a dropped connection
            continue
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(client, upstream, delay_s), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, delay_s), daemon=True).start()


if __name__ == "__main__":
    main()
