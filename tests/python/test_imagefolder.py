"""dsfs.torch's datasets against torchvision's ImageFolder over the tree that was packed."""
import os

import numpy as np
import pytest
import torchvision

import dsfs
import dsfs.torch as dt
from conftest import hidden_tree, pack


@pytest.fixture(scope="module")
def hidden(session_dir):
    """The tree torchvision 0.14 reads (it has no allow_empty), and its store."""
    tree = hidden_tree(session_dir / "hidden", empty_classes=False)
    return tree, dsfs.Store(pack(tree, session_dir / "hidden.db"))


@pytest.fixture(scope="module")
def with_empty(session_dir):
    tree = hidden_tree(session_dir / "hidden-empty")
    return tree, dsfs.Store(pack(tree, session_dir / "hidden-empty.db"))


def rel(tree, samples):
    return [(os.path.relpath(p, tree), t) for p, t in samples]


def pixels(img):
    return np.asarray(img)


def test_same_classes_samples_targets_and_images(hidden):
    tree, store = hidden
    ours = dt.ImageFolder(store)
    theirs = torchvision.datasets.ImageFolder(tree)
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == rel(tree, theirs.samples)
    assert ours.targets == theirs.targets
    assert ours.imgs == ours.samples
    assert len(ours) == len(theirs) > 10
    for i in range(len(ours)):
        a, ta = ours[i]
        b, tb = theirs[i]
        assert ta == tb and a.mode == b.mode == "RGB" and a.size == b.size
        assert (pixels(a) == pixels(b)).all(), ours.samples[i]


def test_empty_classes_raise_as_torchvision(with_empty, hidden):
    tree, store = with_empty
    with pytest.raises(FileNotFoundError) as theirs:
        torchvision.datasets.ImageFolder(tree)
    with pytest.raises(FileNotFoundError) as ours:
        dt.ImageFolder(store)
    assert str(ours.value) == str(theirs.value)
    assert "empty, only_text" in str(ours.value)
    # allow_empty (torchvision 0.18's): the empty classes stay, no sample is added.
    kept = dt.ImageFolder(store, allow_empty=True)
    assert "empty" in kept.classes and "only_text" in kept.classes
    full = dt.ImageFolder(hidden[1])
    assert [p for p, _ in kept.samples] == [p for p, _ in full.samples]
    assert [kept.classes[t] for t in kept.targets] == [full.classes[t] for t in full.targets]


def test_subdirectory_and_path_roots(hidden, session_dir):
    tree, store = hidden
    sub = dt.ImageFolder((store, "cat"))
    theirs = torchvision.datasets.ImageFolder(os.path.join(tree, "cat"))
    assert sub.classes == theirs.classes == ["sub", "sub-a"]
    assert sub.samples == [("cat/" + p, t) for p, t in rel(os.path.join(tree, "cat"), theirs.samples)]
    by_path = dt.ImageFolder((str(session_dir / "hidden.db"), "/cat/"))
    assert by_path.samples == sub.samples
    with pytest.raises(FileNotFoundError, match="Couldn't find any class folder"):
        dt.ImageFolder((store, "dog"))
    with pytest.raises(FileNotFoundError):
        dt.ImageFolder((store, "no such dir"))


def test_is_valid_file_loader_and_transforms(hidden):
    tree, store = hidden
    valid = lambda p: "." in os.path.basename(p)  # noqa: E731: non-images too
    ours = dt.ImageFolder(store, is_valid_file=valid, loader=lambda f: f.read(4),
                          target_transform=lambda t: -t)
    theirs = torchvision.datasets.DatasetFolder(tree, loader=lambda p: open(p, "rb").read(4),
                                                is_valid_file=valid)
    assert ours.samples == rel(tree, theirs.samples)
    assert any(p.endswith("notes.txt") for p, _ in ours.samples)
    for i, (path, _) in enumerate(ours.samples):
        if path.endswith("dangling.txt"):  # a link to nothing: both fail to load it
            with pytest.raises(FileNotFoundError):
                theirs[i]
            with pytest.raises(FileNotFoundError):
                ours[i]
        else:
            assert ours[i] == (theirs[i][0], -theirs[i][1])


def test_pixel_variant_hands_the_same_pixels(hidden):
    tree, store = hidden
    ours = dt.PixelImageFolder(store)
    plain = dt.ImageFolder(store)
    assert ours.samples == plain.samples
    for i in range(len(ours)):
        a, b = ours[i][0], plain[i][0]
        assert a.mode == "RGB" and (pixels(a) == pixels(b)).all(), ours.samples[i]


def test_tensor_variant(session_dir, small_store):
    tree, db = small_store
    ours = dt.TensorImageFolder(dsfs.Store(db))
    theirs = torchvision.datasets.ImageFolder(tree)
    assert ours.classes == theirs.classes and ours.targets == theirs.targets
    assert ours.samples == rel(tree, theirs.samples)
    for i in (0, 5, len(ours) - 1, -1):
        x, t = ours[i]
        assert x.shape == (16, 16, 3) and t == theirs[i][1]
        assert (x.numpy() == pixels(theirs[i][0])).all()


def test_tensor_variant_refuses_mixed_sizes(hidden):
    _, store = hidden
    with pytest.raises(FileNotFoundError, match="tensor view"):
        dt.TensorImageFolder(store)
