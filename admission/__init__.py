"""Berth's imperative shell: everything that talks to a cluster, a file or a user.

One package per concern, each with a small public face in its ``__init__``:

- :mod:`admission.webhook` — the mutating admission webhook: aiohttp TLS server and the pure
  ``review()`` that validates a pod against the policy and patches it (tenant, gang, the
  sharing backend's resources, Berth's scheduling gate). Imports nothing of the controller.
- :mod:`admission.policy` — the cluster admin's policy YAML: model, loading with line numbers,
  cross-references, and the policy as the solver sees it.
- :mod:`admission.controller` — the leader-elected batch controller: watch, snapshot, solve,
  check, release (placement first, gates last), explain why a pod waits.
- :mod:`admission.backends` — where a released pod queues (standalone kube-scheduler, Kueue,
  Volcano); each backend owns its vocabulary.
- :mod:`admission.sharing` — how a GPU fraction becomes resources (time-slicing, MPS, MIG, HAMi).
- :mod:`admission.simulate` — the simulator's shell: trace files in, tables, JSON, plots out.
- :mod:`admission.agent` — the NVML node agent that publishes each node's GPUs.
- :mod:`admission.devcluster` — a real local control plane started as processes.
- :mod:`admission.commands` — one module per ``berth`` subcommand (argparse only), run by
  :mod:`admission.cli`.

Shared modules: :mod:`~admission.constants` (every key Berth writes or reads),
:mod:`~admission.objects` (readers of API objects), :mod:`~admission.jsonpatch` (RFC 6902, for
the webhook, the controller and the tests' fake API server), :mod:`~admission.certs` and
:mod:`~admission.certbuilder` (certificates), :mod:`~admission.kube` (the controller's cluster
API over the ``kubernetes`` client), :mod:`~admission.metrics`, :mod:`~admission.event_loop`,
:mod:`~admission.serve` (the webhook and its controller child process), :mod:`~admission.errors`.

The layers are import-linter contracts in pyproject.toml, run in CI.
"""
