"""``berth serve``: the webhook and the batch controller (what config/ deploys), the controller
in a child process unless ``--one-process``; ``--no-webhook`` runs the controller alone
(config/overlays/split, beside ``berth webhook``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

NAME = "serve"
HELP = "Run the admission webhook and the batch controller (leader-elected) together."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, type=Path, metavar="FILE",
                        help="the policy YAML (reloaded when it changes)")
    parser.add_argument("--cert-dir", type=Path, metavar="DIR",
                        help="directory with tls.crt and tls.key for the webhook (required "
                        "unless --no-webhook)")
    parser.add_argument("--kubeconfig", metavar="K", default=None,
                        help="kubeconfig file (default: the in-cluster service account)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the webhook binds (default 127.0.0.1; 0.0.0.0 in a pod)")
    parser.add_argument("--port", type=int, default=8443, help="webhook port (default 8443)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve /metrics (and /healthz) as plain HTTP on this port instead "
                        "of on the webhook's TLS port (default: on the webhook port)")
    parser.add_argument("--no-webhook", action="store_true",
                        help="run the batch controller alone, without the webhook (which then "
                        "runs as `berth webhook` under an identity with no API rights); "
                        "give --metrics-port for its metrics and probes")
    parser.add_argument("--one-process", action="store_true",
                        help="run the controller in the webhook's process instead of a child "
                        "process of its own: one interpreter less in memory, but the "
                        "controller's work then slows admission in a burst of pod creations")
    parser.add_argument("--controller-nice", type=int, default=10, metavar="N",
                        help="niceness added to the controller process (0..19, default 10): "
                        "when CPU is short, reviews go first and the controller's batch work "
                        "(watches, solve, writes) takes what is left; 0 shares equally")
    # Internal: set by `berth serve` on the controller child it starts.
    parser.add_argument("--metrics-socket", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--nice", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "berth-system"),
                        help="namespace of the leader-election Lease (default $POD_NAMESPACE)")
    parser.add_argument("--lease-name", default="berth-controller")
    parser.add_argument("--identity", default="",
                        help="this replica's name in the Lease (default $POD_NAME or hostname)")
    parser.add_argument("--self-signed-secret", metavar="NAME", default=None,
                        help="keep the webhook certificate in this Secret (created when "
                             "missing) and inject its CA into the webhook configuration")
    parser.add_argument("--webhook-service", default="berth-webhook",
                        help="Service the self-signed certificate names (default berth-webhook)")
    parser.add_argument("--webhook-config", default="berth",
                        help="MutatingWebhookConfiguration that gets the CA (default berth)")
    parser.add_argument("--log-level", default="INFO",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument("--event-loop", default="auto", choices=("auto", "uvloop", "asyncio"),
                        help="auto (default): uvloop when installed, else asyncio's loop")


def run(args: argparse.Namespace) -> int:
    import logging

    from admission import event_loop
    from admission.certs import CertError
    from admission.cli import UsageError
    from admission.commands.webhook import check_ports
    from admission.policy import PolicyError

    check_ports(args)
    for flag, value in (("--controller-nice", args.controller_nice), ("--nice", args.nice)):
        if not 0 <= value <= 19:
            raise UsageError(f"{flag} must be 0..19 (a niceness to add), got {value}")
    if args.cert_dir is None and not args.no_webhook:
        raise UsageError("--cert-dir is required (unless --no-webhook)")
    if not args.policy.is_file():
        raise UsageError(f"--policy: no such file {args.policy}")
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise UsageError(f"--kubeconfig: no such file {args.kubeconfig}")
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from kubernetes.config.config_exception import ConfigException

    from admission.serve import ServeConfig, run_serve

    cfg = ServeConfig(policy=args.policy, cert_dir=args.cert_dir, kubeconfig=args.kubeconfig,
                      host=args.host, port=args.port, metrics_port=args.metrics_port,
                      webhook=not args.no_webhook, namespace=args.namespace,
                      lease_name=args.lease_name, identity=args.identity,
                      self_signed_secret=args.self_signed_secret,
                      webhook_service=args.webhook_service, webhook_config=args.webhook_config,
                      controller_child=not args.one_process, log_level=args.log_level,
                      event_loop=args.event_loop, metrics_socket=args.metrics_socket,
                      parent_pid=args.parent_pid, controller_nice=args.controller_nice,
                      nice=args.nice)
    try:
        event_loop.run(run_serve(cfg), args.event_loop)
    except event_loop.LoopUnavailable as exc:
        raise UsageError(f"--event-loop: {exc}") from None
    except PolicyError as exc:
        raise UsageError(f"--policy: the policy is not valid:\n{exc}") from None
    except CertError as exc:
        raise UsageError(f"--cert-dir: {exc}") from None
    except ConfigException as exc:
        raise UsageError(f"no cluster credentials ({exc}); pass --kubeconfig outside a "
                         "cluster") from None
    except OSError as exc:
        ports = [p for p in (None if args.no_webhook else args.port, args.metrics_port) if p]
        raise UsageError(f"cannot listen on {args.host}:{'/'.join(map(str, ports))}: "
                         f"{exc.strerror or exc}") from None
    return 0
