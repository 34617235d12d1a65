"""The caches' parts: kernel specs (spec), the in-memory cache (memory), the on-disk object
cache's file format (disk_format) and store (disk).

Import the public names from :mod:`svod_min.cache.kernel_cache`.
"""
