"""bench/controller_cycle.py's in-memory API stands in for the API server in a benchmark of the
controller's cycle: it must answer every call the controller can make, or the benchmark breaks
the next time the controller learns to read something new (it did, twice: DRA and Jobs)."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from admission.controller.api import ClusterApi

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "controller_cycle.py"


def test_the_benchmarks_memory_api_has_every_call_of_the_cluster_api() -> None:
    spec = importlib.util.spec_from_file_location("controller_cycle", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    wanted = {name for name, _ in inspect.getmembers(ClusterApi, inspect.isfunction)
              if not name.startswith("_")}
    missing = sorted(n for n in wanted if not callable(getattr(module.MemoryApi(), n, None)))
    assert not missing, f"bench/controller_cycle.py's MemoryApi lacks {missing}"
