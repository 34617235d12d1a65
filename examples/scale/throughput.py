"""Rows per second of the example bundle: a direct run in this process, then Ray Data and Dask with one and
two workers (``python examples/scale/throughput.py [ROWS]``; needs ``svod-min[ray,dask]``).

Each engine's figure is the wall time of one job over ROWS rows on a cluster already started, including
the job's own start (Ray Data starts its actors per job) and the rows' way back to the driver.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, List, Tuple

import numpy as np

BUNDLE = "examples/scale/mlp.svod"


def timed(run: Callable[[], object], rows: int) -> float:
    start = time.perf_counter()
    run()
    return rows / (time.perf_counter() - start)


def direct(x: np.ndarray) -> float:
    from svod_min.interop.batches import load_runner

    runner = load_runner(BUNDLE, threads=1)
    return timed(lambda: runner.run({"x": x}), len(x))


def with_ray(x: np.ndarray, workers: int) -> float:
    import ray

    from svod_min.interop.ray import predict

    ds = ray.data.from_numpy(x).materialize()  # column "data"
    return timed(
        lambda: predict(ds, BUNDLE, inputs={"x": "data"}, actors=workers, batch_size=4096).materialize(), len(x)
    )


def with_dask(x: np.ndarray, workers: int) -> float:
    import dask.array as da
    from distributed import Client, LocalCluster

    from svod_min.interop.dask import predict_blocks, ship

    with LocalCluster(
        n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster, Client(cluster) as client:
        shipped = ship(client, BUNDLE)
        xs = client.persist(da.from_array(x, chunks=(8192, 16)))
        predict_blocks(xs[:64], shipped).compute()  # every worker need not load it yet: a first, small job
        return timed(lambda: predict_blocks(xs, shipped).compute(), len(x))


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    x = np.random.default_rng(0).standard_normal((rows, 16)).astype(np.float32)
    results: List[Tuple[str, float]] = [("direct, this process, 1 thread", direct(x))]
    for workers in (1, 2):
        results.append(("dask, %d worker process(es)" % workers, with_dask(x, workers)))
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    for workers in (1, 2):
        results.append(("ray data, %d actor(s)" % workers, with_ray(x, workers)))
    ray.shutdown()
    for name, rate in results:
        print("%-34s %10.0f rows/s" % (name, rate))


if __name__ == "__main__":
    main()
