"""The mutating admission webhook: transport apart from logic, as kopf keeps them.

- :mod:`~admission.webhook.server`: the aiohttp HTTPS server. It parses the AdmissionReview,
  calls :func:`review`, serialises the answer, reloads the policy and the TLS pair.
- :mod:`~admission.webhook.review`: the pure ``review(request, policy) -> Decision``: scope,
  validation against the policy, the JSON patch (tenant and gang labels, the backend's
  vocabulary, the scheduling gate).
- :mod:`~admission.webhook.demand`: the pod's GPU demand read from its spec.
- :mod:`~admission.webhook.gang`: a pod's gang identity from the vocabularies users already write.
- :mod:`~admission.webhook.patch`: the builder of the JSON patch the review answers with
  (pointers and ops from :mod:`admission.jsonpatch`).
- :mod:`~admission.webhook.types`: the AdmissionReview as TypedDicts.

This package imports nothing from :mod:`admission.controller` (an import-linter contract):
the webhook answers in milliseconds from the policy alone.
"""

from __future__ import annotations

from admission.webhook.gang import GangError, GangIdentity, identify_gang, label_value
from admission.webhook.review import Decision, MalformedReview, Outcome, parse_review, review
from admission.webhook.server import (
    PolicySource,
    WebhookConfig,
    WebhookServer,
    WebhookState,
    run_webhook,
    start_webhook,
)
from admission.webhook.types import AdmissionRequest, AdmissionResponse

__all__ = [
    "AdmissionRequest",
    "AdmissionResponse",
    "Decision",
    "GangError",
    "GangIdentity",
    "MalformedReview",
    "Outcome",
    "PolicySource",
    "WebhookConfig",
    "WebhookServer",
    "WebhookState",
    "identify_gang",
    "label_value",
    "parse_review",
    "review",
    "run_webhook",
    "start_webhook",
]
