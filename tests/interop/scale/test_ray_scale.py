"""Ray Data (a real local Ray, 2 CPUs): the example bundle over 3000 rows equals a direct run row by row, from a
path and from bytes; a killed actor process loses no rows; a truncated bundle, one with objects the loader refuses
and one built for another architecture fail the first batch with svod_min's error at the driver, not retried;
threads follow an actor's CPUs."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterator

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import scale_support  # noqa: E402
from scale_support import (  # noqa: E402
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
)

from svod_min.error import BundleError, LoaderError, NoUsableTargetError  # noqa: E402
from svod_min.interop.ray import BundlePredictor, predict  # noqa: E402

pytestmark = x86_64_only


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """One local Ray for the module: 2 CPUs; the test's own classes travel by value (workers cannot import tests/)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(scale_support)
    yield
    ray.shutdown()


def dataset(n: int = ROWS) -> Any:
    x = rows(n)
    return ray.data.from_items([{"id": i, "x": x[i]} for i in range(n)]), x


def by_id(result: Any, column: str = "probs") -> Any:
    return np.stack([r[column] for r in sorted(result, key=lambda r: r["id"])])


def test_a_path_on_two_actors_equals_the_direct_run(cluster: None) -> None:
    ds, x = dataset()
    out = predict(ds, scale_support.MLP, actors=2, batch_size=500).take_all()
    assert len(out) == ROWS and set(out[0]) == {"id", "x", "probs"}
    np.testing.assert_array_equal(by_id(out), direct_run(x))


def test_bytes_with_other_column_names(cluster: None) -> None:
    ds, x = dataset(300)
    ds = ds.rename_columns({"x": "features"})
    out = predict(ds, mlp_bytes(), inputs={"x": "features"}, outputs={"probs": "p"}, batch_size=70).take_all()
    assert set(out[0]) == {"id", "features", "p"}
    np.testing.assert_array_equal(by_id(out, "p"), direct_run(x))


class ThreadsReport(BundlePredictor):
    def threads(self) -> int:
        """The kernel threads of the loaded model's device."""
        return int(self.runner.model.loaded.plan.device.threads)


@pytest.mark.parametrize("cpus, threads", [(2, 2), (0.5, 1)])
def test_threads_follow_the_actors_cpus(cluster: None, cpus: float, threads: int) -> None:
    actor = ray.remote(num_cpus=cpus)(ThreadsReport).remote(scale_support.MLP)
    assert ray.get(actor.threads.remote()) == threads
    ray.kill(actor)


class DyingPredictor(BundlePredictor):
    """Kills its own process on its second batch, once in the whole job (whoever removes the marker first)."""

    def __init__(self, *args: Any, marker: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marker, self.batches = marker, 0

    def __call__(self, batch: Any) -> Any:
        self.batches += 1
        if self.batches == 2 and remove_first(self.marker):
            os._exit(1)
        return super().__call__(batch)


def test_an_actor_killed_mid_job_loses_no_rows(cluster: None, tmp_path: Any) -> None:
    ds, x = dataset()
    marker = marker_file(str(tmp_path))
    shipped = ray.put(mlp_bytes())  # the bytes, once, in the object store: the restarted actor gets them again
    out = ds.map_batches(
        DyingPredictor,
        fn_constructor_kwargs={"bundle": shipped, "marker": marker},
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=2),
        num_cpus=1,
        batch_size=300,
        max_restarts=2,
        max_task_retries=2,
    ).take_all()
    assert not os.path.exists(marker), "no actor was killed"
    assert len(out) == ROWS
    np.testing.assert_array_equal(by_id(out), direct_run(x))


def test_a_truncated_bundle_fails_the_first_batch_with_bundle_error(cluster: None) -> None:
    ds, _ = dataset(200)
    with pytest.raises(BundleError, match="<bundle in memory, [0-9]+ bytes>: not a readable bundle"):
        predict(ds, truncated_bundle(), actors=1, batch_size=50).take_all()


def test_objects_the_loader_refuses_fail_with_its_error(cluster: None, tmp_path: Any) -> None:
    ds, _ = dataset(200)
    broken = broken_object_bundle(str(tmp_path / "broken.svod"))
    with pytest.raises(LoaderError, match="malformed ELF object"):
        predict(ds, broken, actors=1, batch_size=50).take_all()


def test_a_bundle_for_another_architecture_fails_with_its_error(cluster: None, tmp_path: Any) -> None:
    ds, _ = dataset(200)
    with open(wrong_arch_bundle(str(tmp_path / "arm.svod")), "rb") as fh:
        arm = fh.read()
    with pytest.raises(NoUsableTargetError, match="the kernel has objects for aarch64"):
        predict(ds, arm, actors=1, batch_size=50).take_all()
