"""``berth webhook``: run the admission webhook alone (``berth serve`` adds the controller)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "webhook"
HELP = "Run the mutating admission webhook (HTTPS) for GPU pods."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, type=Path, metavar="FILE",
                        help="the policy YAML (reloaded when it changes)")
    parser.add_argument("--cert-dir", required=True, type=Path, metavar="DIR",
                        help="directory with tls.crt and tls.key (reloaded when they change)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8443, help="port (default 8443)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve /metrics as plain HTTP on this port instead of on the "
                        "webhook's TLS port (default: on the webhook port)")
    parser.add_argument("--read-claims", action="store_true",
                        help="read the ResourceClaims and ResourceClaimTemplates a GPU pod names "
                        "(DRA) with in-cluster credentials, or --kubeconfig's; without it such "
                        "pods are refused with the reason")
    parser.add_argument("--kubeconfig", default=None, metavar="FILE",
                        help="credentials for --read-claims (default: in-cluster)")
    parser.add_argument("--log-level", default="INFO",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument("--event-loop", default="auto", choices=("auto", "uvloop", "asyncio"),
                        help="auto (default): uvloop when installed, else asyncio's loop")


def check_ports(args: argparse.Namespace) -> None:
    """--port and --metrics-port (shared with ``berth serve``)."""
    from admission.cli import UsageError

    for flag, port in (("--port", args.port), ("--metrics-port", args.metrics_port)):
        if port is not None and not 0 < port < 65536:
            raise UsageError(f"{flag} must be 1..65535, got {port}")
    webhook = not getattr(args, "no_webhook", False)
    if webhook and args.metrics_port is not None and args.metrics_port == args.port:
        raise UsageError(f"--metrics-port must differ from --port ({args.port})")


def run(args: argparse.Namespace) -> int:
    import logging

    from admission import event_loop
    from admission.certs import CertError
    from admission.cli import UsageError
    from admission.policy import PolicyError
    from admission.webhook import WebhookConfig, run_webhook

    check_ports(args)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    config = WebhookConfig(policy=args.policy, cert_dir=args.cert_dir, host=args.host,
                           port=args.port, metrics_port=args.metrics_port,
                           read_claims=args.read_claims, kubeconfig=args.kubeconfig)
    try:
        event_loop.run(run_webhook(config), args.event_loop)
    except event_loop.LoopUnavailable as exc:
        raise UsageError(f"--event-loop: {exc}") from None
    except PolicyError as exc:
        raise UsageError(f"--policy: the policy is not valid:\n{exc}") from None
    except CertError as exc:
        raise UsageError(f"--cert-dir: {exc}") from None
    except OSError as exc:
        where = f"{args.host}:{args.port}" + (
            f" or {args.metrics_port}" if args.metrics_port is not None else "")
        raise UsageError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    return 0
