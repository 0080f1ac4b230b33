"""dsfs.torch: torchvision-style datasets over a dsfs store (docs/python.md)."""
