"""One small local Ray instance for a test module (2 CPUs, a 150 MB object store): its workers
inherit this process's environment, with ``environment`` set on top while it runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest


@contextmanager
def local_ray(environment: Mapping[str, str] | None = None) -> Iterator[None]:
    import ray

    with pytest.MonkeyPatch.context() as patch:
        for name, value in (environment or {}).items():
            patch.setenv(name, value)
        ray.init(
            num_cpus=2,
            object_store_memory=150 * 1024**2,
            include_dashboard=False,
            log_to_driver=False,
        )
        try:
            yield
        finally:
            ray.shutdown()
