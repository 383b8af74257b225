"""``berth certs``: a CA and the webhook's serving key pair, optionally the webhook config."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "certs"
HELP = "Create a CA and the webhook's serving certificate (ca.crt, tls.crt, tls.key)."
#: Longest validity: a hundred years (X.509 dates end in 9999, and no key should live longer).
MAX_DAYS = 36_500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="directory for ca.crt, tls.crt and tls.key")
    parser.add_argument("--host", required=True,
                        help="the address the apiserver calls (IP or DNS name), e.g. 127.0.0.1")
    parser.add_argument("--dns", action="append", default=[], metavar="NAME",
                        help="extra DNS name or IP in the certificate (repeatable), e.g. "
                        "berth-webhook.berth-system.svc")
    parser.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    parser.add_argument("--render-webhook-config", metavar="FILE",
                        help="also write the MutatingWebhookConfiguration with the caBundle "
                        "to FILE ('-' for stdout), scoped as config/base/webhook.yaml")
    parser.add_argument("--url", help="webhook URL in the config "
                        "(default https://HOST:8443/mutate-pods)")
    parser.add_argument("--service", metavar="NAMESPACE/NAME",
                        help="call an in-cluster Service instead of a URL")
    parser.add_argument("--policy", type=Path, metavar="FILE",
                        help="limit the webhook to the policy's managed namespaces")
    parser.add_argument("--failure-policy", choices=("Fail", "Ignore"), default="Fail",
                        help="what the apiserver does when the webhook is unreachable")


def _check_names(args: argparse.Namespace) -> None:
    """--host and every --dns must be a DNS name or an IP literal (--dns may be a wildcard)."""
    from admission.certs import san_problem
    from admission.cli import UsageError

    problem = san_problem(args.host)
    if problem:
        raise UsageError(f"--host: {problem}")
    for name in args.dns:
        problem = san_problem(name, wildcard=True)
        if problem:
            raise UsageError(f"--dns: {problem}")


def _check_paths(args: argparse.Namespace) -> None:
    """Refuse an --out that is a file and a config path that cannot be written, before any
    key is made."""
    from admission.cli import UsageError

    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: is not a directory; name a directory for ca.crt, "
                         "tls.crt and tls.key")
    target = args.render_webhook_config
    if target and target != "-":
        path = Path(target)
        if path.is_dir():
            raise UsageError(f"--render-webhook-config {target}: is a directory; name a file "
                             "inside it, or '-' for stdout")
        if not path.parent.is_dir():
            raise UsageError(f"--render-webhook-config {target}: the directory {path.parent} "
                             "does not exist; create it first")


def _url_host(host: str) -> str:
    """``host`` as it goes into a URL: an IPv6 literal in brackets."""
    import ipaddress

    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def run(args: argparse.Namespace) -> int:
    from admission.certs import CertError, render_webhook_config, webhook_template, write_bundle
    from admission.cli import UsageError
    from admission.policy import PolicyError, load_policy

    if not 1 <= args.days <= MAX_DAYS:
        raise UsageError(f"--days must be in 1..{MAX_DAYS}, got {args.days}")
    _check_names(args)
    _check_paths(args)
    service = None
    if args.service:
        ns, _, name = args.service.partition("/")
        if not ns or not name:
            raise UsageError(f"--service must be NAMESPACE/NAME, got {args.service!r}")
        service = (ns, name)
    namespaces = None
    if args.policy:
        try:
            namespaces = sorted(load_policy(args.policy).managed_namespaces)
        except PolicyError as exc:
            raise UsageError(f"--policy: {exc}") from None
    if args.render_webhook_config:
        try:
            webhook_template()  # before any file is written: the scope comes from config/
        except CertError as exc:
            raise UsageError(f"--render-webhook-config: {exc}") from None
    try:
        bundle = write_bundle(args.out, args.host, args.dns, args.days)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {bundle.ca_cert}, {bundle.tls_cert}, {bundle.tls_key} "
          f"(SAN: {', '.join([args.host, *args.dns])}; {args.days} days)")
    if args.render_webhook_config:
        url = args.url or f"https://{_url_host(args.host)}:8443/mutate-pods"
        text = render_webhook_config(bundle.ca_cert.read_bytes(), url=url, service=service,
                                     namespaces=namespaces, failure_policy=args.failure_policy)
        if args.render_webhook_config == "-":
            print(text, end="")
        else:
            try:
                Path(args.render_webhook_config).write_text(text)
            except OSError as exc:
                raise UsageError(f"--render-webhook-config {args.render_webhook_config}: cannot "
                                 f"write: {exc.strerror or exc}") from None
            print(f"wrote {args.render_webhook_config}")
    return 0
