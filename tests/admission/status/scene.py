"""Clusters for the status tests, brought where they are by the real controller (its cycle on
the in-memory API server): the conditions and plans the status reads are the controller's."""

from __future__ import annotations

from datetime import datetime

from admission import constants as c
from admission.controller.settings import from_policy
from admission.policy import Policy, check_text
from admission.status import ClusterView, Picture, picture, read
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller
from tests.admission.controller.objects import FakeClock, node, pod
from tests.admission.status.fakesource import POLICY_TEXT, FakeSource


def policy(text: str = POLICY_TEXT) -> Policy:
    p, issues = check_text(text)
    assert p is not None, issues
    return p


class Scene:
    """Two racks of one 8-GPU node each; the controller of the test policy."""

    def __init__(self, nodes: int = 2, gpus: int = 8, text: str = POLICY_TEXT) -> None:
        self.api = FakeApi()
        for i in range(nodes):
            self.api.add_node(node(f"n{i}", gpus=gpus, rack=f"rack-{i}"))
        self.clock = FakeClock()
        self.text = text
        self.ctl = controller(self.api, self.clock, s=from_policy(policy(text)))

    def add(self, name: str, *, ns: str = "team-a", gang: str | None = None, size: int = 1,
            gpus: int = 1, annotations_extra: dict[str, str] | None = None,
            labels_extra: dict[str, str] | None = None, **kw: object) -> None:
        p = pod(name, ns=ns, gang=gang, size=size, gpus=gpus, created=self.clock.now,
                **kw)  # type: ignore[arg-type]
        p["metadata"]["annotations"].update(annotations_extra or {})
        p["metadata"]["labels"].update(labels_extra or {})
        self.api.add_pod(p)

    def cycle(self, advance: float = 10.0) -> None:
        self.ctl.relist()
        self.clock.advance(advance)
        self.ctl.run_cycle()

    def bind_released(self) -> None:
        """kube-scheduler: every released pod bound where Berth put it."""
        for key, p in self.api.pods.items():
            ann = p["metadata"].get("annotations") or {}
            if not p["spec"].get("schedulingGates") and not p["spec"].get("nodeName") \
                    and ann.get(c.ANNOTATION_ASSIGNED_NODE):
                self.api.bind(key, ann[c.ANNOTATION_ASSIGNED_NODE])

    def source(self, **kw: object) -> FakeSource:
        kw.setdefault("policy_text", self.text)
        return FakeSource(self.api, **kw)  # type: ignore[arg-type]

    def view(self, **kw: object) -> ClusterView:
        return read(self.source(**kw), policy_path=None)

    def picture(self, **kw: object) -> Picture:
        return picture(self.view(**kw), self.now)

    @property
    def now(self) -> datetime:
        return self.clock.now


def quota_scene() -> Scene:
    """team-a (quota 8, may not borrow) runs one 8-GPU gang; two 2x4-GPU gangs wait at quota,
    w1 created before w2."""
    s = Scene()
    s.add("run-0", gang="run", gpus=8)
    s.cycle()
    s.bind_released()
    for g in ("w1", "w2"):
        for k in range(2):
            s.add(f"{g}-{k}", gang=g, size=2, gpus=4)
        s.clock.advance(1)
    s.cycle()
    s.cycle()  # the second batch cycle that passes them over tells them why they wait
    return s
