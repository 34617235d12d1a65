"""Bridges between svod_min and other frameworks.

* :mod:`.tinygrad`, :mod:`.tinygrad_loader` — tinygrad schedules exported as plan bundles (used on a
  development machine with tinygrad; what they write runs with svod_min alone), and svod_min as
  tinygrad's CPU program loader.
* :mod:`.ray`, :mod:`.dask` — a bundle as batch inference on Ray Data and Dask workers, one loaded
  model per worker; :mod:`.batches` cuts any batch into the bundle's fixed batch.

Importing this package imports no framework.
"""
