"""A damaged store: the files `dsfs verify` names raise OSError (EIO, the store's message),
every other file reads as it was packed."""
import errno
import os
import re

import pytest

import dsfs
from conftest import dsfs_cli, pack


def test_damaged_files_raise_the_rest_read(session_dir):
    tree = session_dir / "damaged"
    tree.mkdir()
    rng = __import__("random").Random(5)
    for i in range(4):
        (tree / f"r{i}.bin").write_bytes(rng.randbytes(200000))
    for i in range(4):
        (tree / f"t{i}.txt").write_text(f"text {i}\n" * 50)
    db = pack(tree, session_dir / "damaged.db")
    snippet = (tree / "r2.bin").read_bytes()[100000:100064]
    data = bytearray(open(db, "rb").read())
    at = data.find(snippet)
    assert at > 0, "the incompressible file is stored as it is"
    data[at + 10] ^= 0xFF
    open(db, "wb").write(data)
    verify = dsfs_cli("verify", db, check=False)
    assert verify.returncode != 0
    bad = set(re.findall(r"^BAD /(\S+):", verify.stdout + verify.stderr, re.M))
    assert bad == {"r2.bin"}
    store = dsfs.Store(db)
    for name in sorted(os.listdir(tree)):
        if name in bad:
            with pytest.raises(OSError) as e:
                store.read(name)
            assert e.value.errno == errno.EIO and "checksum" in str(e.value)
            with pytest.raises(OSError):
                with store.open(name) as f:
                    f.read()
        else:
            assert store.read(name) == (tree / name).read_bytes(), name
