"""The interference rules as the model needs them: by QoS class name, cached.

The classes in force are the interference model's defaults with the policy's overrides
(:func:`solver.interference.resolve_profiles`); a pod without a class, or with an unknown one,
counts as :data:`solver.interference.UNCLASSIFIED`. This is exactly how the checker judges a
plan, so what the model allows the checker accepts.
"""

from __future__ import annotations

from collections.abc import Sequence

from solver import interference
from solver.types import QoSProfile, SolverPolicy

Classes = tuple[str | None, ...]


class QosRules:
    def __init__(self, policy: SolverPolicy) -> None:
        self.profiles = interference.resolve_profiles(policy.qos_classes)
        self._allowed: dict[Classes, bool] = {}
        # True when some class bans sharing or carries an SLO: otherwise nothing to model
        self.restrictive = any(
            p.exclusive or p.no_share_with or p.latency_sensitive for p in self.profiles.values()
        )

    def profile(self, name: str | None) -> QoSProfile:
        return interference.profile_for(name, self.profiles)

    def allowed(self, classes: Sequence[str | None]) -> bool:
        """May pods of these classes hold one GPU together (bans and every SLO)?"""
        if len(classes) < 2:
            return True
        key = tuple(sorted(classes, key=lambda c: "" if c is None else c))
        hit = self._allowed.get(key)
        if hit is None:
            hit = interference.group_allowed([self.profile(c) for c in key])
            self._allowed[key] = hit
        return hit

    def slowdown(self, name: str | None, others: Sequence[str | None]) -> float:
        return interference.slowdown(self.profile(name), [self.profile(o) for o in others])

    def slo_slowdown(self, name: str | None) -> float | None:
        """The largest slowdown the class's SLO tolerates; None when it has no SLO."""
        p = self.profile(name)
        if not p.latency_sensitive or p.slo_ms is None or not p.solo_latency_ms:
            return None
        return p.slo_ms / p.solo_latency_ms
