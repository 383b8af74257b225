"""Shared helpers for the agent's tests: read a fake machine the way the agent does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fake_nvml import MACHINES, FakeNvml

from admission.agent.inventory import NodeInventory, nvml_session, read_inventory


def inventory_of(nvml: FakeNvml) -> NodeInventory:
    with nvml_session(nvml):
        return read_inventory(nvml)


@pytest.fixture(params=sorted(MACHINES))
def machine(request: pytest.FixtureRequest) -> Callable[[], FakeNvml]:
    """Each fake machine in turn."""
    return MACHINES[request.param]
