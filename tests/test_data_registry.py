"""data/registry.md must agree with the checksums the readers verify."""
from pathlib import Path

from mmtoken.datasets import images, text

DOC = (Path(__file__).resolve().parent.parent / "data" / "registry.md").read_text()


def test_every_checksum_in_the_code_is_documented():
    digests = [s["sha256"] for s in text.SOURCES.values() if s.get("sha256")]
    digests += [f["sha256"] for split in images.FASHION_MNIST.values() for f in split.values()]
    digests += [images.CIFAR10["sha256"], images.CIFAR10["md5"]]
    missing = [d for d in digests if d not in DOC]
    assert not missing, f"checksums missing from data/registry.md: {missing}"
