"""``berth agent``: the GPU node agent (a DaemonSet), or a one-shot look at the local GPUs.

``--once --print`` needs no cluster: it reads the GPUs through NVML and prints what the agent
would publish (``--json``: the inventory in its stable, versioned form, usable as a test
fixture). Without ``--print`` the agent patches its node's labels and annotations, once or in a
loop. Where NVIDIA's library or driver is missing it says so in one line and exits 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
from typing import Any

NAME = "agent"
HELP = "Publish this node's GPUs (NVML) as node labels and annotations, or print them."
#: Longest wait between two reads of the GPUs, or two node patches: a day.
MAX_INTERVAL_S = 86_400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="one round, then exit")
    parser.add_argument("--print", dest="print_", action="store_true",
                        help="print the local inventory instead of publishing (no cluster)")
    parser.add_argument("--json", action="store_true",
                        help="with --print: the inventory as JSON (stable format)")
    parser.add_argument("--node", default=os.environ.get("NODE_NAME"),
                        help="node to publish on (default: $NODE_NAME)")
    parser.add_argument("--interval", type=float, default=60.0, metavar="S",
                        help="seconds between reads of the GPUs (default 60)")
    parser.add_argument("--min-patch-interval", type=float, default=30.0, metavar="S",
                        help="at most one node patch per S seconds (default 30)")
    parser.add_argument("--kubeconfig", default=None, metavar="K",
                        help="kubeconfig file (default: in-cluster service account)")
    parser.add_argument("--no-gfd-labels", dest="gfd_labels", action="store_false",
                        help="leave nvidia.com/ labels to GPU Feature Discovery")
    parser.add_argument("--mig-strategy", choices=("none", "single", "mixed"), default=None,
                        help="the device plugin's MIG strategy (default: inferred)")
    parser.add_argument("--no-usage", dest="usage", action="store_false",
                        help="do not publish utilisation and power readings")


def _check(args: argparse.Namespace) -> None:
    from admission.cli import UsageError

    if args.json and not args.print_:
        raise UsageError("--json goes with --print")
    if not args.print_ and not args.node:
        raise UsageError("--node NAME is required to publish (or set NODE_NAME, or use --print)")
    if not (math.isfinite(args.interval) and 0 < args.interval <= MAX_INTERVAL_S):
        raise UsageError(f"--interval must be > 0 and at most {MAX_INTERVAL_S:g} seconds, got "
                         f"{args.interval}")
    if not (math.isfinite(args.min_patch_interval)
            and 0 <= args.min_patch_interval <= MAX_INTERVAL_S):
        raise UsageError(f"--min-patch-interval must be in [0, {MAX_INTERVAL_S:g}] seconds, "
                         f"got {args.min_patch_interval}")
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        what = "is a directory" if os.path.isdir(args.kubeconfig) else "no such file"
        raise UsageError(f"--kubeconfig {args.kubeconfig}: {what}; give the kubeconfig file, "
                         "or leave it out inside a cluster")


def _load_nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _human(inv: Any, meta: Any) -> str:
    lines = [f"driver {inv.driver_version or '?'}  CUDA {inv.cuda_driver_version or '?'}  "
             f"{len(inv.gpus)} GPU(s)"]
    for g in inv.gpus:
        if g.error:
            lines.append(f"  gpu {g.index}: UNREADABLE ({g.error})")
            continue
        mig = ("MIG " + ",".join(m.profile for m in g.mig)) if g.mig_enabled else (
            "MIG off" if g.mig_capable else "no MIG")
        nvl = f"{g.nvlink_domain} ({g.nvlink_links} links)" if g.nvlink_domain else "PCIe only"
        power = (f"{g.power_draw_w or '?'}/{g.power_limit_w}W" if g.power_limit_w is not None
                 else "power ?")
        util = ("" if g.utilisation_sm_pct is None
                else f"  sm {g.utilisation_sm_pct}% mem {g.utilisation_membw_pct}%")
        lines.append(f"  gpu {g.index}: {g.model}  {g.memory_mib} MiB  {mig}  {nvl}  "
                     f"bus {g.pci_bus_id} numa {g.numa_node}  {power}{util}")
    lines.append("labels:")
    lines += [f"  {k}={v}" for k, v in sorted(meta.labels.items())]
    lines.append("annotations:")
    lines += [f"  {k}={v}" for k, v in sorted(meta.annotations.items())]
    return "\n".join(lines)


def _core_api(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call,unused-ignore]
    else:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call,unused-ignore]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call,unused-ignore]
    return client.CoreV1Api()


def run(args: argparse.Namespace, *, nvml: Any = None, api: Any = None) -> int:
    """``nvml`` and ``api`` replace pynvml and the Kubernetes client (tests pass fakes)."""
    _check(args)
    from admission.agent import schema
    from admission.agent.inventory import (
        NvmlUnavailable,
        inventory_to_dict,
        nvml_session,
        read_inventory,
    )
    from admission.agent.loop import run_loop, run_once
    from admission.agent.metadata import to_node_metadata
    from admission.agent.publisher import Publisher

    nvml = nvml if nvml is not None else _load_nvml()
    if nvml is None:
        print("berth agent: the pynvml module (nvidia-ml-py) is not installed", file=sys.stderr)
        return 1

    def to_metadata(inv: Any) -> Any:
        return to_node_metadata(inv, gfd_labels=args.gfd_labels, mig_strategy=args.mig_strategy,
                                usage=args.usage)

    try:
        with nvml_session(nvml):
            if args.print_:
                inv = read_inventory(nvml)
                if args.json:
                    print(json.dumps(inventory_to_dict(inv), indent=2, sort_keys=True))
                else:
                    print(_human(inv, to_metadata(inv)))
                return 0
            if api is None:
                api = _core_api(args.kubeconfig)

            def owns(key: str) -> bool:
                return schema.is_agent_key(key) or (args.gfd_labels and schema.is_gfd_key(key))

            publisher = Publisher(api, args.node, owns=owns,
                                  min_interval_s=args.min_patch_interval)
            if args.once:
                result = run_once(nvml, publisher, to_metadata)
                print(f"berth agent: node {args.node}: {result.action}"
                      + (f" ({result.error})" if result.error else ""))
                return 1 if result.action == "failed" else 0
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
            stop = threading.Event()
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, lambda *_: stop.set())
            run_loop(nvml, publisher, to_metadata, interval_s=args.interval, stop=stop)
            return 0
    except NvmlUnavailable as exc:
        print(f"berth agent: {exc}", file=sys.stderr)
        return 1
    except nvml.NVMLError as exc:
        print(f"berth agent: reading the GPUs through NVML failed: {exc}", file=sys.stderr)
        return 1
