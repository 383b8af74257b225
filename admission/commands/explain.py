"""``berth explain POD``: why one pod waits (its gang, tenant, the controller's reason, its
place in the queue, Berth's plan, other schedulers' gates) and what would let it start.

Reads the cluster with the user's kubeconfig and RBAC; a refusal is one line naming what to
ask for, exit status 2.
"""

from __future__ import annotations

import argparse

from admission.commands.status import add_cluster_arguments

NAME = "explain"
HELP = "Explain why a pod waits and what would let it start."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", metavar="POD", help="the pod's name (or NAMESPACE/NAME)")
    parser.add_argument("-n", "--namespace", metavar="NS", default=None,
                        help="the pod's namespace (default: the context's, else default)")
    add_cluster_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from admission.errors import UsageError
    from admission.status import (
        SourceError,
        StatusError,
        connect,
        explain,
        picture,
        print_explanation,
        read,
        read_pod,
        to_json,
        with_pod,
    )

    name = args.pod
    namespace = args.namespace
    if "/" in name:
        prefix, name = name.split("/", 1)
        if prefix in ("pod", "pods"):
            prefix = ""
        if prefix and namespace and prefix != namespace:
            raise UsageError(f"POD {args.pod} names namespace {prefix}, -n says {namespace}")
        namespace = namespace or prefix or None
    if not name:
        raise UsageError("POD: give the pod's name")
    try:
        conn = connect(args.kubeconfig, args.context)
        target = read_pod(conn.source, namespace or conn.namespace, name)
        view = read(conn.source, policy_path=args.policy, berth_namespace=args.berth_namespace,
                    events=False)
        with_pod(view, target.pod)
        result = explain(picture(view, datetime.now(UTC)), target.pod, target.events,
                         podgroup=target.podgroup, podgroup_error=target.podgroup_error,
                         events_error=target.events_error)
    except (StatusError, SourceError) as exc:
        raise UsageError(str(exc) if isinstance(exc, StatusError) else exc.message) from None
    if args.output == "json":
        print(to_json(result))
    else:
        print_explanation(result)
    return 0
