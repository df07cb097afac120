"""Real data: registry of sources and checksums, cached readers."""

from mmtoken.datasets.download import (
    DatasetError,
    DatasetMissing,
    atomic_write_bytes,
    cache_dir,
    sha256_file,
    verify_sha256,
)

__all__ = ["DatasetError", "DatasetMissing", "cache_dir", "sha256_file", "verify_sha256", "atomic_write_bytes"]
