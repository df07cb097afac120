"""Real data: registry of sources and checksums, cached readers."""
from .registry import DatasetError, DatasetMissing, cache_dir, sha256_file, verify_sha256, atomic_write_bytes

__all__ = ["DatasetError", "DatasetMissing", "cache_dir", "sha256_file", "verify_sha256", "atomic_write_bytes"]
