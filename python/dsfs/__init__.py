"""dsfs: read a dsfs store from Python, without FUSE, root or a mount.

    import dsfs
    store = dsfs.Store("imagenet.db")                  # LMDB, RocksDB or s3://BUCKET/PREFIX
    store.listdir("train")                             # ['n01440764', ...]
    with store.open("train/n01440764/x.jpg") as f:     # a binary file object: PIL, numpy
        img = PIL.Image.open(f).convert("RGB")
    store.pixels("train/n01440764/x.jpg")              # H x W x 3 uint8 (the npy view)

Paths are relative to the store's root (a leading "/" changes nothing), as the mount shows
them: the views are there too (".dsfs/bmp/train/...", ".dsfs/tensor/train/images.npy").
dsfs.torch holds ImageFolder datasets over a store. See docs/python.md.
"""
import io
import operator
import os
import posixpath
import re
import stat as _stat

from ._dsfs import _Store

__all__ = ["Store", "File", "VIEWS"]

# The views of fixed names (bmp-N and jpeg-N too: N from 16 to 4096).
VIEWS = ("original", "bmp", "npy", "tensor")
_SIZED_VIEW = re.compile(r"(bmp|jpeg)-([0-9]{2,4})")


def _check_view(view):
    """ValueError unless `view` names a view (docs/views.md), as Store(view=...) checks it."""
    if not isinstance(view, str):
        raise TypeError(f"view: a view's name ('bmp', 'npy', 'bmp-256', ...), not {type(view).__name__}")
    m = _SIZED_VIEW.fullmatch(view)
    if view not in VIEWS and not (m and 16 <= int(m.group(2)) <= 4096):
        raise ValueError(f"unknown view {view!r}: original, bmp, npy, tensor, bmp-N or jpeg-N "
                         "(N from 16 to 4096)")


def _option_text(key, value):
    if value is True:
        return ""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"option {key}={value!r}: a flag is given as {key}=True")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    raise ValueError(f"option {key}={value!r}: not a string, a number or True")


class Store(_Store):
    """A dsfs store opened for reading in this process.

    Store(path_or_url, **options)

    path_or_url: a store's path (LMDB or RocksDB, detected) or s3://BUCKET/PREFIX (a store
    `dsfs push` put in object storage; credentials from the AWS chain as for a mount:
    AWS_* variables, ~/.aws). options are the mount's -o options that mean something without
    a mount, by the same names and values: cache_size="1G" (the RAM cache; default from the
    memory limit, the cgroup's), cache_dir=, cache_disk= (an s3:// store's disk cache; as a
    mount, 8G under ~/.cache/dsfs by default), s3_attempts=, s3_timeout=, s3_anonymous=True,
    s3_addressing=, os_readahead=, view= (the view shown at the root), uid=, gid=, umask=,
    log_level=. A mount-only option (threads, kernel, ...) or an unknown one: ValueError.

    Every read releases the GIL; one Store may be shared by any number of threads. After
    fork() (DataLoader workers) the child reopens the store on its first call; a Store
    pickles as its path and options (spawn). Errors are OSError subclasses
    (FileNotFoundError, IsADirectoryError, NotADirectoryError; EIO with the store's message
    for damaged data): never wrong bytes.
    """

    def __init__(self, path, **options):
        opts = {k: _option_text(k, v) for k, v in options.items()}
        super().__init__(path, opts)
        self._kwargs = dict(options)

    def __reduce__(self):
        return (_reopen, (self.path, self._kwargs))

    def __repr__(self):
        return f"dsfs.Store({self.path!r})"

    def stat(self, path="", *, follow_symlinks=True):
        """stat(path='', *, follow_symlinks=True) -> os.stat_result

        The attributes the mount shows for `path` (mode, size, times; st_ino the mount's
        inode number). os.stat's errors."""
        return os.stat_result(self._stat(path, follow_symlinks))

    def lstat(self, path):
        """lstat(path) -> os.stat_result: stat() of a link itself."""
        return self.stat(path, follow_symlinks=False)

    def exists(self, path):
        """exists(path) -> bool: True if `path` exists (links followed), as os.path.exists."""
        try:
            self._stat(path, True)
        except OSError:
            return False
        return True

    def isdir(self, path):
        """isdir(path) -> bool: True for a directory (links followed), as os.path.isdir."""
        try:
            return _stat.S_ISDIR(self._stat(path, True)[0])
        except OSError:
            return False

    def isfile(self, path):
        """isfile(path) -> bool: True for a regular file (links followed), as os.path.isfile."""
        try:
            return _stat.S_ISREG(self._stat(path, True)[0])
        except OSError:
            return False

    def scandir(self, path=""):
        """scandir(path='') -> list of DirEntry

        The entries of directory `path`, each with name, path, is_dir(), is_file(),
        is_symlink() and stat() as os.DirEntry (is_dir and is_file follow links unless
        follow_symlinks=False)."""
        return [DirEntry(self, path, name, mode) for name, mode, _ in self._scandir(path)]

    def walk(self, top="", topdown=True, onerror=None, followlinks=False):
        """walk(top='', topdown=True, onerror=None, followlinks=False)

        Yields (dirpath, dirnames, filenames) for each directory from `top` down, as os.walk
        (dirpath joined from top; links to directories listed in dirnames, and entered only
        with followlinks; a directory already being walked above is not entered again)."""
        yield from self._walk(top, topdown, onerror, followlinks, ())

    def _walk(self, top, topdown, onerror, followlinks, above):
        try:
            entries = self.scandir(top)
            here = self._stat(top, True)[1]
        except OSError as e:
            if onerror is not None:
                onerror(e)
            return
        dirs, files = [], []
        for e in entries:
            (dirs if e.is_dir() else files).append(e)
        dirnames = [e.name for e in dirs]
        links = {e.name for e in dirs if e.is_symlink()}
        filenames = [e.name for e in files]
        if topdown:
            yield top, dirnames, filenames  # the caller may prune dirnames, as os.walk's
        below = above + (here,)
        for name in dirnames:
            if not followlinks and name in links:
                continue
            sub = posixpath.join(top, name)
            try:
                if self._stat(sub, True)[1] in below:
                    continue  # a link back up: os.walk would loop until ELOOP
            except OSError:
                continue
            yield from self._walk(sub, topdown, onerror, followlinks, below)
        if not topdown:
            yield top, dirnames, filenames

    def open(self, path, mode="rb", buffering=-1, *, view=None):
        """open(path, mode='rb', buffering=-1, *, view=None) -> binary file object

        File `path` (links followed) for reading, what PIL.Image.open, numpy.load and
        torch.load take: a file of at most 8 MiB is read whole at once (the GIL released) and
        served from memory (an io.BytesIO, with .name); a larger one, and any with
        buffering=0, is a dsfs.File (io.RawIOBase: read, readinto, seek, tell, readable,
        seekable; each read a read of the store). view='bmp', 'npy', 'bmp-256', ... opens the
        file that view shows for `path` (for 'npy' name it as the view does: 'x.jpg.npy').
        Mode 'rb' only: stores are read-only."""
        if mode not in ("r", "rb", "br"):
            raise ValueError(f"dsfs.Store.open: mode {mode!r}: only 'rb' (stores are read-only)")
        raw = File(self, self.view_path(path, view))
        if buffering == 0 or raw.size() > _WHOLE_FILE_BYTES:
            return raw
        with raw:
            data = raw.read()
        return _Bytes(data, raw.name)

    def view_path(self, path, view):
        """view_path(path, view) -> str: the path at which view `view` shows `path`
        ('.dsfs/bmp/a/b.jpg'); `path` itself for view None or the view at the root."""
        if view is None:
            return path
        _check_view(view)
        if view == self._root_view():
            return path
        return posixpath.join(".dsfs", view, os.fsdecode(path).lstrip("/"))

    def _root_view(self):
        view = self.__dict__.get("_view")
        if view is None:
            view = self.__dict__["_view"] = self.info()["view"]
        return view

    def read_view(self, path, view):
        """read_view(path, view) -> bytes: read() of the file view `view` shows for `path`."""
        return self.read(self.view_path(path, view))

    def pixels(self, path, size=None):
        """pixels(path, size=None) -> numpy.ndarray (H x W x 3, uint8)

        The decoded pixels of image `path`, what PIL's Image.open(f).convert("RGB") gives
        (the npy view's array). size=N: resized as torchvision's Resize(N) (the bmp-N view's
        pixels). ValueError for a file the views do not decode (not a JPEG or PNG, or one they
        serve as it is)."""
        import numpy as np
        if size is not None:
            size = operator.index(size)
            if not 16 <= size <= 4096:
                raise ValueError(f"pixels: size={size}: from 16 to 4096 (the bmp-N views)")
        if size is None:
            try:
                raw = File(self, self.view_path(path + ".npy", "npy"))
            except FileNotFoundError:
                self._not_decoded(path)
            with raw:
                return _read_npy(raw)
        data = self.read_view(path, f"bmp-{size}")
        if data[:2] != b"BM":
            self._not_decoded(path)
        return _bmp_pixels(np, data)

    def _not_decoded(self, path):
        self._stat(path, True)  # FileNotFoundError for what is not there
        raise ValueError(f"{path}: not an image the views decode (a JPEG or PNG they render)")

    def tensor(self, path=""):
        """tensor(path='') -> (images, labels, classes, files)

        The tensor view of directory `path`: images (N x H x W x 3 uint8, every image below
        it in ImageFolder's order), labels (int64 class indices), classes and the files'
        paths relative to `path`. FileNotFoundError if the view has none (images of
        different sizes: the reason is in .dsfs/tensor/PATH/classes.txt's absence)."""
        path = os.fsdecode(path)
        base = posixpath.join(path.strip("/"), "")
        try:
            f = File(self, self.view_path(base + "images.npy", "tensor"))
        except (FileNotFoundError, NotADirectoryError):
            if not _stat.S_ISDIR(self._stat(path, True)[0]):  # FileNotFoundError for none
                raise NotADirectoryError(20, "Not a directory", path) from None
            raise FileNotFoundError(
                2, "no tensor view of this directory (its images are not all of one size, or "
                "it holds none)", path) from None
        with f:
            images = _read_npy(f)
        with File(self, self.view_path(base + "labels.npy", "tensor")) as f:
            labels = _read_npy(f)
        classes = self.read_view(base + "classes.txt", "tensor").decode(
            "utf-8", "surrogateescape").splitlines()
        files = self.read_view(base + "files.txt", "tensor").decode(
            "utf-8", "surrogateescape").splitlines()
        return images, labels, classes, files


# Store.open reads files up to this size whole.
_WHOLE_FILE_BYTES = 8 << 20


class _Bytes(io.BytesIO):
    """A file read whole: io.BytesIO with the file's name."""

    def __init__(self, data, name):
        super().__init__(data)
        self.name = name

    def __repr__(self):
        return f"<dsfs file {self.name!r} (in memory)>"


def _reopen(path, kwargs):
    return Store(path, **kwargs)


class DirEntry:
    """An entry of Store.scandir(): name, path, is_dir(), is_file(), is_symlink(), stat()."""

    __slots__ = ("_store", "name", "path", "_mode", "_target")

    def __init__(self, store, top, name, mode):
        self._store = store
        self.name = name
        self.path = posixpath.join(top, name)
        self._mode = mode
        self._target = None

    def _followed(self):
        if self._target is None:
            try:
                self._target = self._store._stat(self.path, True)[0]
            except OSError:
                self._target = 0  # a dangling link
        return self._target

    def is_symlink(self):
        return _stat.S_ISLNK(self._mode)

    def is_dir(self, *, follow_symlinks=True):
        mode = self._followed() if follow_symlinks and self.is_symlink() else self._mode
        return _stat.S_ISDIR(mode)

    def is_file(self, *, follow_symlinks=True):
        mode = self._followed() if follow_symlinks and self.is_symlink() else self._mode
        return _stat.S_ISREG(mode)

    def stat(self, *, follow_symlinks=True):
        return self._store.stat(self.path, follow_symlinks=follow_symlinks)

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"<dsfs.DirEntry {self.name!r}>"


class File(io.RawIOBase):
    """A regular file of a store, open for reading: io.RawIOBase's read, readinto, readall,
    seek, tell, readable, seekable (Store.open wraps it in an io.BufferedReader). The file's
    bytes are the store's as of the open; reads release the GIL."""

    def __init__(self, store, path):
        super().__init__()
        self._store = store
        self.name = path
        self._ino, self._size = store._open(path)
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, b):
        self._checkClosed()
        n = self._store._readinto_at(self._ino, self._pos, b) if self._pos < self._size else 0
        self._pos += n
        return n

    def read(self, size=-1):
        self._checkClosed()
        size = -1 if size is None else operator.index(size)
        if size < 0 or size > self._size - self._pos:
            size = max(0, self._size - self._pos)  # never more than is left (any size asked)
        if size == 0:
            return b""
        data = self._store._read_at(self._ino, self._pos, size)
        self._pos += len(data)
        return data

    def readall(self):
        return self.read(-1)

    def seek(self, offset, whence=io.SEEK_SET):
        self._checkClosed()
        offset, whence = operator.index(offset), operator.index(whence)
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, "Invalid argument: negative seek position", self.name)
        self._pos = pos
        return pos

    def tell(self):
        self._checkClosed()
        return self._pos

    def size(self):
        """The file's size in bytes."""
        return self._size

    def fileno(self):
        raise io.UnsupportedOperation("a dsfs.File has no file descriptor")

    def __repr__(self):
        return f"<dsfs.File {self.name!r}>"


def _read_npy(f):
    import numpy as np
    fmt = np.lib.format
    version = fmt.read_magic(f)
    shape, fortran, dtype = (fmt.read_array_header_1_0(f) if version == (1, 0)
                             else fmt.read_array_header_2_0(f))
    arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    view = memoryview(arr.reshape(-1, order="A").view(np.uint8))
    if arr.nbytes and f.readinto(view) != arr.nbytes:
        raise OSError(5, "truncated array", f.name)
    return arr


def _bmp_pixels(np, data):
    # A 24-bit bottom-up BMP (what the bmp views serve): BGR rows padded to 4 bytes.
    offset = int.from_bytes(data[10:14], "little")
    width = int.from_bytes(data[18:22], "little", signed=True)
    height = int.from_bytes(data[22:26], "little", signed=True)
    stride = (width * 3 + 3) & ~3
    rows = np.frombuffer(data, np.uint8, count=stride * abs(height), offset=offset)
    img = rows.reshape(abs(height), stride)[:, :width * 3].reshape(abs(height), width, 3)
    if height > 0:
        img = img[::-1]
    return np.ascontiguousarray(img[:, :, ::-1])
