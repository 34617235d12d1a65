"""Dask (a real LocalCluster: 2 worker processes): the example bundle over 3000 rows equals a direct run row by row,
as arrays and as dataframes, from a path, from bytes and scattered once; one model per worker, keyed by content;
a killed worker process loses no rows; a truncated bundle, one with objects the loader refuses and one built for
another architecture fail with svod_min's error at the driver, not retried."""

from __future__ import annotations

import os
from typing import Any, Iterator

import numpy as np
import pytest

pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from scale_support import (
    MLP,
    ROWS,
    broken_object_bundle,
    direct_run,
    marker_file,
    mlp_bytes,
    remove_first,
    rows,
    truncated_bundle,
    wrong_arch_bundle,
    x86_64_only,
)  # noqa: E402

from svod_min.error import BundleError, LoaderError, NoUsableTargetError  # noqa: E402
from svod_min.interop.dask import predict_blocks, predict_partitions, ship, worker_threads  # noqa: E402
from svod_min.planfile.bundle import bundle_digest  # noqa: E402

pytestmark = x86_64_only


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """One local cluster for the module: 2 nanny-managed worker processes of 1 thread each."""
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            yield c


def test_an_array_from_a_path_equals_the_direct_run(client: Any) -> None:
    x = rows()
    y = predict_blocks(da.from_array(x, chunks=(250, 16)), MLP)
    assert y.shape == (ROWS, 8) and y.dtype == np.float32 and y._meta.shape == (0, 0)
    np.testing.assert_array_equal(y.compute(), direct_run(x))


def test_bytes_and_a_shipped_bundle_equal_the_direct_run_and_load_once_per_worker(client: Any) -> None:
    x = rows()
    want = direct_run(x)
    np.testing.assert_array_equal(predict_blocks(da.from_array(x, chunks=(333, 16)), mlp_bytes()).compute(), want)
    shipped = ship(client, MLP)
    np.testing.assert_array_equal(predict_blocks(da.from_array(x, chunks=(400, 16)), shipped).compute(), want)
    held = client.run(lambda: __import__("svod_min.interop.batches", fromlist=["cached_digests"]).cached_digests())
    assert set(held.values()) == {(bundle_digest(MLP),)}  # path, bytes, shipped: one content, one model each
    assert set(client.run(worker_threads).values()) == {1}  # threads_per_worker=1: one kernel thread a call


def test_a_dataframe_gets_the_outputs_as_columns(client: Any) -> None:
    import dask.dataframe as dd
    import pandas as pd

    x = rows()
    features = ["f%d" % i for i in range(16)]
    frame = pd.DataFrame(x.astype(np.float64), columns=features).assign(key=np.arange(ROWS))
    out = predict_partitions(dd.from_pandas(frame, npartitions=7), mlp_bytes(), inputs={"x": features}).compute()
    assert list(out.columns) == features + ["key"] + ["probs_%d" % j for j in range(8)]
    out = out.sort_values("key")
    np.testing.assert_array_equal(out[["probs_%d" % j for j in range(8)]].to_numpy(), direct_run(x))


def _die_once(block: Any, marker: str = "", block_info: Any = None) -> Any:
    """Kills its worker process (the nanny starts another) on block 5, once in the whole job."""
    if block_info[0]["chunk-location"][0] == 5 and remove_first(marker):
        os._exit(1)
    return block


def test_a_worker_killed_mid_job_loses_no_rows(client: Any, tmp_path: Any) -> None:
    x = rows()
    marker = marker_file(str(tmp_path))
    upstream = da.from_array(x, chunks=(200, 16)).map_blocks(_die_once, marker=marker, dtype=np.float32)
    got = predict_blocks(upstream, ship(client, mlp_bytes())).compute()
    assert not os.path.exists(marker), "no worker was killed"
    np.testing.assert_array_equal(got, direct_run(x))


def test_a_truncated_bundle_fails_at_the_driver_before_anything_runs(client: Any) -> None:
    with pytest.raises(BundleError, match="<bundle in memory, [0-9]+ bytes>: not a readable bundle"):
        predict_blocks(da.from_array(rows(100), chunks=50), truncated_bundle())


def test_objects_the_loader_refuses_fail_the_first_task_once(client: Any, tmp_path: Any) -> None:
    broken = broken_object_bundle(str(tmp_path / "broken.svod"))
    y = predict_blocks(da.from_array(rows(200), chunks=(50, 16)), broken)  # the plan reads fine at the driver
    with pytest.raises(LoaderError, match="malformed ELF object"):
        y.compute(retries=0)


def test_a_bundle_for_another_architecture_fails_the_first_task(client: Any, tmp_path: Any) -> None:
    arm = ship(client, wrong_arch_bundle(str(tmp_path / "arm.svod")))
    with pytest.raises(NoUsableTargetError, match="the kernel has objects for aarch64"):
        predict_blocks(da.from_array(rows(200), chunks=(50, 16)), arm).compute()
