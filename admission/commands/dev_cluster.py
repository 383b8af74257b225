"""``berth dev-cluster up|down|status``: a local control plane with fake GPU nodes, for people.

The same cluster the e2e suite runs against (see e2e/README.md): the upstream etcd,
kube-apiserver, kube-controller-manager and kube-scheduler as processes on 127.0.0.1, and kwok
keeping fake GPU nodes Ready. ``up`` returns once everything is healthy and leaves it running;
``down`` stops it, from any shell, using the state recorded in the work directory.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

NAME = "dev-cluster"
HELP = "Start, stop or inspect a local Kubernetes control plane with fake GPU nodes."


def _default_dir() -> Path:
    root = os.environ.get("BERTH_E2E_CACHE", str(Path.home() / ".cache" / "berth-e2e"))
    return Path(root) / "dev-cluster"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=None,
                        help="work directory: certs, kubeconfig, logs, state "
                             "(default: $BERTH_E2E_CACHE/dev-cluster)")
    sub = parser.add_subparsers(dest="dev_cluster_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start the control plane and create fake GPU nodes")
    up.add_argument("--blocks", type=int, default=1, help="blocks of racks (default 1)")
    up.add_argument("--racks", type=int, default=2, help="racks per block (default 2)")
    up.add_argument("--nodes", type=int, default=2, help="nodes per rack (default 2)")
    up.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    up.add_argument("--nvlink-domains", type=int, default=1,
                    help="NVLink domains per node, GPUs split evenly (default 1)")
    up.add_argument("--gpu-product", default="NVIDIA-H100-80GB-HBM3",
                    help="nvidia.com/gpu.product label of the nodes")
    up.add_argument("--with-berth", action="store_true",
                    help="also run Berth (berth serve, its webhook, RBAC and the sample "
                         "policy's tenant namespaces); see docs/quickstart.md")
    up.add_argument("--backend", choices=("standalone", "kueue", "volcano"),
                    default="standalone",
                    help="with --with-berth: where Berth releases pods; kueue and volcano "
                         "also start the real Kueue manager or Volcano scheduler with the "
                         "policy's queues (default standalone)")
    down = sub.add_parser("down", help="stop every process and delete the work directory")
    down.add_argument("--keep-files", action="store_true",
                      help="keep the work directory (logs, etcd data)")
    sub.add_parser("status", help="say which components run and whether the API is ready")


#: Most fake nodes (blocks x racks x nodes) and GPUs a node: one apiserver takes 10,000 nodes.
MAX_NODES = 10_000
MAX_GPUS = 64
#: A Kubernetes label value: at most 63 characters, alphanumeric at both ends.
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def _counts_ok(args: argparse.Namespace) -> None:
    from admission.cli import UsageError

    for flag, top in (("blocks", MAX_NODES), ("racks", MAX_NODES), ("nodes", MAX_NODES),
                      ("gpus", MAX_GPUS), ("nvlink_domains", args.gpus)):
        value = getattr(args, flag)
        if not 1 <= value <= top:
            why = " (the GPUs a node, --gpus)" if flag == "nvlink_domains" else ""
            raise UsageError(f"--{flag.replace('_', '-')} must be between 1 and {top}{why}, "
                             f"got {value}")
    total = args.blocks * args.racks * args.nodes
    if total > MAX_NODES:
        raise UsageError(f"--blocks x --racks x --nodes is {total} nodes; at most {MAX_NODES}")
    if not args.gpu_product or not _LABEL_VALUE.fullmatch(args.gpu_product):
        raise UsageError(f"--gpu-product {args.gpu_product[:80]!r}: must be a label value: "
                         "1 to 63 letters, digits, '-', '_' or '.', alphanumeric at both ends")


def run(args: argparse.Namespace) -> int:
    from admission.cli import UsageError
    from admission.devcluster.cluster import StateError

    workdir: Path = (args.dir or _default_dir()).expanduser().resolve()
    if workdir.exists() and not workdir.is_dir():
        raise UsageError(f"--dir {workdir}: is not a directory; name a directory for the "
                         "cluster's files")
    try:
        if args.dev_cluster_command == "up":
            _counts_ok(args)
            if args.backend != "standalone" and not args.with_berth:
                raise UsageError(f"--backend {args.backend} needs --with-berth")
            return _up(workdir, args)
        if args.dev_cluster_command == "down":
            return _down(workdir, keep=args.keep_files)
        return _status(workdir)
    except StateError as exc:
        raise UsageError(str(exc)) from None


def _up(workdir: Path, args: argparse.Namespace) -> int:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    from admission.cli import UsageError
    from admission.devcluster import (
        DevCluster,
        MissingBinary,
        StartupError,
        berth,
        create_nodes,
        gpu_fleet,
    )
    from admission.devcluster.cluster import STATE_FILE

    if (workdir / STATE_FILE).exists():
        old = DevCluster.load(workdir)
        if any(old.running().values()):
            raise UsageError(f"a cluster is already running in {workdir}; "
                             f"run 'berth dev-cluster down' first")
        old.wipe()
    cluster = DevCluster(workdir=workdir, die_with_parent=False)
    if args.with_berth:
        try:
            berth.check_binaries(args.backend)
        except MissingBinary as exc:
            raise UsageError(str(exc)) from None
    try:
        cluster.start()
    except MissingBinary as exc:
        raise UsageError(str(exc)) from None
    except StartupError as exc:
        print(f"berth dev-cluster: {exc}")
        print(f"logs kept in {cluster.log_dir}")
        return 1
    api = config.new_client_from_config(str(cluster.kubeconfig))
    nodes = gpu_fleet(blocks=args.blocks, racks_per_block=args.racks, nodes_per_rack=args.nodes,
                      gpus_per_node=args.gpus, nvlink_domains_per_node=args.nvlink_domains,
                      gpu_product=args.gpu_product,
                      shared_slots_per_gpu=berth.shared_slots() if args.with_berth else 0)
    create_nodes(client.CoreV1Api(api), nodes)
    print(f"cluster up: {cluster.server}, {len(nodes)} fake GPU nodes "
          f"({len(nodes) * args.gpus} x {args.gpu_product})", flush=True)
    if args.with_berth:
        try:
            berth.install(cluster, backend=args.backend, nodes=nodes,
                          say=lambda line: print(line, flush=True))
        except (RuntimeError, TimeoutError, OSError, ApiException) as exc:
            print(f"berth dev-cluster: Berth did not start: {exc}")
            cluster.stop()
            print(f"stopped the cluster; logs kept in {cluster.log_dir}")
            return 1
    print(f"logs: {cluster.log_dir}")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    if args.with_berth:
        print(berth.next_steps(args.backend))
    return 0


def _down(workdir: Path, *, keep: bool) -> int:
    from admission.devcluster import DevCluster
    from admission.devcluster.cluster import STATE_FILE

    if not (workdir / STATE_FILE).exists():
        print(f"no cluster recorded in {workdir}")
        return 0
    cluster = DevCluster.load(workdir)
    if keep:
        cluster.stop()
        print(f"stopped; files kept in {workdir}")
    else:
        cluster.wipe()
        print(f"stopped; removed {workdir}")
    return 0


def _status(workdir: Path) -> int:
    from admission.devcluster import DevCluster
    from admission.devcluster.berth import BerthInfo
    from admission.devcluster.cluster import STATE_FILE
    from admission.devcluster.processes import http_ok, https_context

    if not (workdir / STATE_FILE).exists():
        print(f"no cluster recorded in {workdir}")
        return 1
    cluster = DevCluster.load(workdir)
    running = cluster.running()
    for name, alive in running.items():
        print(f"{name:<26} {'running' if alive else 'STOPPED'}")
    pki = cluster.pki
    ready = http_ok(f"{cluster.server}/readyz",
                    https_context(pki.ca_cert, pki.admin_cert, pki.admin_key))
    print(f"{'apiserver /readyz':<26} {'ok' if ready else 'NOT READY'} ({cluster.server})")
    info = BerthInfo.load(workdir)
    if info is not None:
        serving = info.serving()
        ready = ready and serving
        print(f"{'berth /readyz':<26} {'ok' if serving else 'NOT READY'} ({info.url}, "
              f"backend {info.backend}, policy {info.policy})")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0 if ready and running and all(running.values()) else 1
