"""``berth status``: per tenant its GPU quota, use, borrowing and lending, and the waiting
gangs in the solver's queue order with the reason the controller gave (docs/status.md).

Reads the cluster with the user's kubeconfig and RBAC; a refusal is one line naming what to
ask for, exit status 2.
"""

from __future__ import annotations

import argparse

NAME = "status"
HELP = "Show each tenant's quota, used, borrowed and lent GPUs and the waiting gangs."


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``berth status`` and ``berth explain`` share."""
    parser.add_argument("--policy", metavar="FILE", default=None,
                        help="the policy YAML (default: the ConfigMap berth-policy, key "
                             "policy.yaml, in --berth-namespace, as config/base deploys it)")
    parser.add_argument("--berth-namespace", metavar="NS", default="berth-system",
                        help="where Berth is installed: its policy ConfigMap and Lease "
                             "(default berth-system)")
    parser.add_argument("--kubeconfig", metavar="K", default=None,
                        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", metavar="C", default=None,
                        help="kubeconfig context (default: the current one)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="table (default) or json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from admission.errors import UsageError
    from admission.status import (
        SourceError,
        StatusError,
        connect,
        picture,
        print_status,
        read,
        status,
        to_json,
    )

    try:
        conn = connect(args.kubeconfig, args.context)
        view = read(conn.source, policy_path=args.policy, berth_namespace=args.berth_namespace)
        report = status(picture(view, datetime.now(UTC)))
    except (StatusError, SourceError) as exc:
        raise UsageError(str(exc) if isinstance(exc, StatusError) else exc.message) from None
    if args.output == "json":
        print(to_json(report))
    else:
        print_status(report)
    return 0
