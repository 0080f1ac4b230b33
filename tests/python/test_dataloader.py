"""DataLoader over dsfs.torch.ImageFolder: 0, 2 and 4 workers, under fork and spawn, the
same batches as torchvision's ImageFolder over the tree."""
import pytest
import torch
import torchvision
from torchvision import transforms

import dsfs
import dsfs.torch as dt


def batches(ds, workers, context):
    kw = {} if workers == 0 else {"multiprocessing_context": context}
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=workers, **kw)
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.fixture(scope="module")
def want(small_store):
    tree, _ = small_store
    return batches(torchvision.datasets.ImageFolder(tree, transform=transforms.ToTensor()), 0, None)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork"), (4, "fork"), (2, "spawn"),
                                             (4, "spawn")])
def test_dataloader_workers(small_store, want, workers, context):
    _, db = small_store
    ds = dt.ImageFolder(dsfs.Store(db), transform=transforms.ToTensor())
    if context == "fork":
        ds[0]  # the parent read first: the workers reopen what it opened
    got = batches(ds, workers, context)
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(y, wy) and torch.equal(x, wx)


def test_dataloader_decoded_variants(small_store, want):
    _, db = small_store
    store = dsfs.Store(db)
    pix = batches(dt.PixelImageFolder(store, transform=transforms.ToTensor()), 2, "fork")
    ten = batches(dt.TensorImageFolder(store), 2, "fork")
    for (x, y), (tx, ty), (wx, wy) in zip(pix, ten, want):
        assert torch.equal(x, wx) and torch.equal(y, wy) and torch.equal(ty, wy)
        assert torch.equal(tx.permute(0, 3, 1, 2).float() / 255, wx)
