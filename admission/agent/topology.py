"""NVLink domains: connected components of the NVLink graph of one node.

A GPU's NVLinks end either at another GPU (direct NVLink bridges, e.g. two 4-GPU islands) or at
an NVSwitch (HGX boards, where every GPU reaches every other through the switches). Treating
switches as vertices of the same graph makes both cases one computation: GPUs that share a
switch, or a path of links, are in one domain. GPUs with no active link form no domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def nvlink_domains(links: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Group GPUs (keyed by PCI bus id) into domains.

    ``links`` maps each GPU's bus id to the bus ids at the far end of its active links (GPUs or
    switches). Returns the domains as lists of GPU bus ids, each list sorted, the lists ordered
    by their first member; GPUs without links are left out.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving keeps the trees flat
            x = parent[x]
        return x

    linked: set[str] = set()
    for gpu, remotes in links.items():
        for remote in remotes:
            linked.add(gpu)
            if remote in links:  # the far end is a GPU even if it reported no links itself
                linked.add(remote)
            ra, rb = find(gpu), find(remote)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = {}
    for gpu in links:
        if gpu in linked:
            groups.setdefault(find(gpu), []).append(gpu)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def normalise_bus_id(bus_id: str | bytes) -> str:
    """``domain:bus:device.function`` in NVML's 8-hex-digit-domain form, lower case.

    NVML reports the local bus id with an 8-digit domain and some drivers report a link's far
    end with a 4-digit one; both must compare equal.
    """
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    text = text.strip().rstrip("\x00").lower()
    parts = text.split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):08x}:{parts[1]}:{parts[2]}"
        except ValueError:
            return text
    return text
