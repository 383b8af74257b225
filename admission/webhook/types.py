"""AdmissionReview v1 as TypedDicts: what kube-apiserver sends and what the webhook answers.

Only the fields Berth reads or writes are declared; the apiserver may send more, which pass
through untouched. ``total=False`` because the apiserver omits empty fields.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class GroupVersionKind(TypedDict, total=False):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict, total=False):
    group: str
    version: str
    resource: str


class AdmissionRequest(TypedDict, total=False):
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str
    name: str
    namespace: str
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    userInfo: dict[str, Any]
    object: dict[str, Any]
    oldObject: dict[str, Any] | None
    dryRun: bool
    options: dict[str, Any] | None


class AdmissionStatus(TypedDict, total=False):
    code: int
    reason: str
    message: str


class AdmissionResponse(TypedDict, total=False):
    uid: str
    allowed: bool
    status: AdmissionStatus
    patchType: Literal["JSONPatch"]
    patch: str  # base64 of the JSON Patch document
    warnings: list[str]


class AdmissionReviewResponse(TypedDict):
    apiVersion: str
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse
