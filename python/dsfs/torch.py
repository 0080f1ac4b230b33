"""dsfs.torch: torchvision's ImageFolder over a dsfs store, without a mount.

    from dsfs.torch import ImageFolder            # instead of torchvision.datasets' one
    ds = ImageFolder(dsfs.Store("imagenet.db"), transform=...)       # the store's root
    ds = ImageFolder((dsfs.Store("imagenet.db"), "train"), ...)      # a directory inside it
    ds = ImageFolder("imagenet.db", ...)                             # a store's path or URL

The same classes, class_to_idx, samples (paths relative to the store's root: what
Store.open takes), targets, order and PIL images as torchvision.datasets.ImageFolder over the
tree that was packed. Two variants hand the same samples already decoded:

    PixelImageFolder   PIL images made from the bmp view's pixels (no JPEG/PNG decode)
    TensorImageFolder  the tensor view: each sample a torch.uint8 H x W x 3 tensor

In DataLoader workers each process reads the store itself (reopened after fork; pickled as
its path and options under spawn) and takes 1/num_workers of the RAM cache's budget.
"""
import io
import posixpath

import torch.utils.data

from . import Store

try:
    from torchvision.datasets.folder import IMG_EXTENSIONS
    from torchvision.datasets.vision import VisionDataset as _Base
except ImportError:  # torchvision absent: the same tuple, a plain Dataset
    IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    _Base = None

__all__ = ["ImageFolder", "DatasetFolder", "PixelImageFolder", "TensorImageFolder",
           "find_classes", "make_dataset", "pil_loader", "IMG_EXTENSIONS"]


def _store_and_dir(root):
    """(Store, directory inside it) of an ImageFolder root."""
    if isinstance(root, tuple):
        if len(root) != 2:
            raise ValueError("root: a Store, a store's path, or (Store or path, directory)")
        store, sub = root
    else:
        store, sub = root, ""
    if not isinstance(store, Store):
        store = Store(store)
    return store, str(sub).strip("/")


def has_file_allowed_extension(filename, extensions):
    return filename.lower().endswith(extensions if isinstance(extensions, str) else tuple(extensions))


def find_classes(store, directory):
    """The sorted class directories of `directory` (links followed), as torchvision's."""
    classes = sorted(e.name for e in store.scandir(directory) if e.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {c: i for i, c in enumerate(classes)}


def make_dataset(store, directory, class_to_idx=None, extensions=None, is_valid_file=None,
                 allow_empty=False):
    """(path, class index) of each sample, in torchvision's order: each class's
    sorted(os.walk(class dir, followlinks=True)), each directory's sorted file names."""
    if class_to_idx is None:
        _, class_to_idx = find_classes(store, directory)
    elif not class_to_idx:
        raise ValueError("'class_to_index' must have at least one entry to collect any samples.")
    both_none = extensions is None and is_valid_file is None
    both_something = extensions is not None and is_valid_file is not None
    if both_none or both_something:
        raise ValueError("Both extensions and is_valid_file cannot be None or not None at the same time")
    if extensions is not None:
        def is_valid_file(x):
            return has_file_allowed_extension(x, extensions)
    instances = []
    available = set()
    for target_class in sorted(class_to_idx.keys()):
        index = class_to_idx[target_class]
        target_dir = posixpath.join(directory, target_class)
        if not store.isdir(target_dir):
            continue
        for root, _, fnames in sorted(store.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = posixpath.join(root, fname)
                if is_valid_file(path):
                    instances.append((path, index))
                    available.add(target_class)
    empty = set(class_to_idx.keys()) - available
    if empty and not allow_empty:
        msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
        if extensions is not None:
            msg += ("Supported extensions are: "
                    f"{extensions if isinstance(extensions, str) else ', '.join(extensions)}")
        raise FileNotFoundError(msg)
    return instances


def _open_whole(store, path):
    """An image file read whole into memory: one call into the store (Store.open does more,
    for files of any size)."""
    return _named_bytes(store.read(path), path)


def pil_loader(f):
    """torchvision's pil_loader over an open binary file: Image.open(f).convert("RGB")."""
    from PIL import Image
    img = Image.open(f)
    return img.convert("RGB")


class _WorkerShare:
    """Gives a DataLoader worker its share of the store's RAM cache, once per process."""

    def _share_in_worker(self):
        info = torch.utils.data.get_worker_info()
        n = info.num_workers if info is not None else 1
        if n != self._shared:
            self.store.share_cache(n)
            self._shared = n

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_shared"] = 1  # a spawned worker's store is a new one
        return state


class DatasetFolder(_WorkerShare, (_Base or torch.utils.data.Dataset)):
    """torchvision.datasets.DatasetFolder over a store: `loader` gets each sample as an open
    binary file (not a path: the store's files have none), e.g. `lambda f: np.load(f)`."""

    def __init__(self, root, loader, extensions=None, transform=None, target_transform=None,
                 is_valid_file=None, allow_empty=False):
        self.store, self.directory = _store_and_dir(root)
        if _Base is not None:
            super().__init__(f"{self.store.path}:{self.directory}", transform=transform,
                             target_transform=target_transform)
        else:
            self.root = f"{self.store.path}:{self.directory}"
            self.transform, self.target_transform = transform, target_transform
        classes, class_to_idx = self.find_classes(self.directory)
        samples = self.make_dataset(self.directory, class_to_idx, extensions, is_valid_file,
                                    allow_empty)
        self.loader = loader
        self.extensions = extensions
        self.classes = classes
        self.class_to_idx = class_to_idx
        self.samples = samples
        self.targets = [s[1] for s in samples]
        self._shared = 1

    def find_classes(self, directory):
        return find_classes(self.store, directory)

    def make_dataset(self, directory, class_to_idx, extensions=None, is_valid_file=None,
                     allow_empty=False):
        if class_to_idx is None:
            raise ValueError("The class_to_idx parameter cannot be None.")
        return make_dataset(self.store, directory, class_to_idx, extensions, is_valid_file,
                            allow_empty)

    def load(self, path):
        """The sample at `path`, as the loader makes it."""
        with _open_whole(self.store, path) as f:
            return self.loader(f)

    def __getitem__(self, index):
        self._share_in_worker()
        path, target = self.samples[index]
        sample = self.load(path)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __len__(self):
        return len(self.samples)


class ImageFolder(DatasetFolder):
    """torchvision.datasets.ImageFolder over a dsfs store.

    ImageFolder(root, transform=None, target_transform=None, loader=None,
                is_valid_file=None, allow_empty=False)

    root: a dsfs.Store (its root), a store's path or URL, or (Store or path, directory) for
    a directory inside it. classes, class_to_idx, samples, targets and the PIL images are
    torchvision's over the tree that was packed (symbolic links followed, files kept by
    IMG_EXTENSIONS unless is_valid_file decides); sample paths are relative to the store's
    root. loader: called with each sample's open binary file (default pil_loader:
    Image.open(f).convert("RGB")). allow_empty: classes without a valid file are kept
    (torchvision 0.18's parameter) instead of FileNotFoundError.
    """

    def __init__(self, root, transform=None, target_transform=None, loader=None,
                 is_valid_file=None, allow_empty=False):
        super().__init__(root, loader or pil_loader,
                         IMG_EXTENSIONS if is_valid_file is None else None,
                         transform=transform, target_transform=target_transform,
                         is_valid_file=is_valid_file, allow_empty=allow_empty)
        self.imgs = self.samples
        self._fast = loader is None

    def load(self, path):
        # The default loader: an image the store decodes exactly as PIL does (a JPEG or PNG
        # recorded at pack time as one the views reproduce) is made from the pixels decoded
        # in C++, the GIL released; anything else (CMYK, damaged, other formats, a failed
        # read) goes to PIL as in torchvision, which then raises or decodes it as there.
        if self._fast and _pil_backend():
            img = _pixels_image(self.store, path, False)
            if img is not None:
                return img
        return super().load(path)


class PixelImageFolder(ImageFolder):
    """ImageFolder whose images come decoded: each sample is the PIL image made from the
    views' pixels (what convert("RGB") of the original gives) whatever `loader` is: over a
    store packed with --predecode, the stored pixels (no JPEG or PNG decode at all), else
    decoded in C++. keep=True keeps them in the store's RAM cache (worth it where a process
    reads the samples more than once: persistent_workers=True, threads, no workers). A file
    the views serve as it is (not a JPEG or PNG, or too large) is decoded by `loader` as
    ImageFolder would."""

    def __init__(self, root, transform=None, target_transform=None, loader=None,
                 is_valid_file=None, allow_empty=False, keep=False):
        super().__init__(root, transform, target_transform, loader, is_valid_file, allow_empty)
        self.keep = keep

    def load(self, path):
        img = _pixels_image(self.store, path, self.keep)
        if img is None:  # served as it is: decoded by the loader from the original
            return DatasetFolder.load(self, path)
        return img


def _pil_backend():
    """True unless torchvision's image backend is set to another than PIL (accimage)."""
    try:
        from torchvision import get_image_backend
    except ImportError:
        return True
    return get_image_backend() == "PIL"


def _pixels_image(store, path, keep):
    """The RGB PIL image of `path` from the pixels the store decodes (kept in its RAM cache when
    `keep`), None if it does not decode that file or the read fails (the caller reads the
    original, and raises what torchvision would)."""
    from PIL import Image
    try:
        got = store._pixels(path, keep)
    except OSError:
        return None
    if got is None:
        return None
    width, height, rgb = got
    return Image.frombuffer("RGB", (width, height), rgb, "raw", "RGB", 0, 1)


def _named_bytes(data, name):
    f = io.BytesIO(data)
    f.name = name
    return f


class TensorImageFolder(_WorkerShare, torch.utils.data.Dataset):
    """The tensor view of a directory as a dataset: the samples of ImageFolder(root), each a
    torch.uint8 tensor H x W x 3 (its rows of .dsfs/tensor/DIR/images.npy, read as needed)
    and its class index. classes, class_to_idx, samples and targets as ImageFolder's.
    FileNotFoundError if the directory has no tensor view (images of different sizes).
    transform gets the H x W x 3 tensor."""

    def __init__(self, root, transform=None, target_transform=None):
        import numpy as np
        self.store, self.directory = _store_and_dir(root)
        base = posixpath.join(self.directory, "")
        view = lambda name: self.store.view_path(base + name, "tensor")  # noqa: E731
        try:
            raw = self.store.open(view("images.npy"), buffering=0)
        except FileNotFoundError:
            self.store.tensor(self.directory)  # raises the reason
            raise
        with raw:
            fmt = np.lib.format
            fmt.read_magic(raw)
            shape, _, _ = fmt.read_array_header_1_0(raw)
            self._offset = raw.tell()
        self._images_path = view("images.npy")
        self._shape = tuple(shape[1:])
        with self.store.open(view("labels.npy")) as f:
            labels = np.load(f)
        self.classes = self.store.read(view("classes.txt")).decode(
            "utf-8", "surrogateescape").splitlines()
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        files = self.store.read(view("files.txt")).decode("utf-8", "surrogateescape").splitlines()
        self.targets = [int(t) for t in labels]
        self.samples = [(posixpath.join(self.directory, f), t) for f, t in zip(files, self.targets)]
        self.transform, self.target_transform = transform, target_transform
        self._file = None
        self._shared = 1

    def __getstate__(self):
        state = super().__getstate__()
        state["_file"] = None
        return state

    def __getitem__(self, index):
        import numpy as np
        self._share_in_worker()
        if self._file is None:
            self._file = self.store.open(self._images_path, buffering=0)
        if index < 0:
            index += len(self.samples)
        target = self.targets[index]
        arr = np.empty(self._shape, np.uint8)
        self._file.seek(self._offset + index * arr.nbytes)
        if self._file.readinto(memoryview(arr.reshape(-1))) != arr.nbytes:
            raise OSError(5, "short read of the tensor view", self._images_path)
        sample = torch.from_numpy(arr)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __len__(self):
        return len(self.samples)
