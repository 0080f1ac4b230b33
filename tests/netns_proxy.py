#!/usr/bin/python3
"""A TCP relay from inside a network namespace to a port of this one, for the S3 tests.

  netns_proxy.py NETNS LISTEN_PORT TARGET_PORT

Listens on 127.0.0.1:LISTEN_PORT inside network namespace NETNS (/run/netns/NETNS, made by the
test) and relays every connection to 127.0.0.1:TARGET_PORT of the namespace it was started in
(the gateway). A client in NETNS then reaches the gateway through NETNS's loopback, where the
test puts a `tc netem` delay: the network between nodes, without an address outside namespaces
the test made. Prints "ready" once listening; runs until killed.
"""
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def setns(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def pump(src, dst):
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    netns, listen_port, target_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
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
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    main()
