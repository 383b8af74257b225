"""Turn the agent's utilisation readings into solo samples that refine QoS profiles.

The agent does not know which pods run on which GPU; the controller does (it placed them). So
the controller calls :func:`solo_samples` with a node's ``berth.dev/gpu-usage`` annotation and
the QoS classes it knows on each GPU of that node, and feeds the result to
:func:`solver.interference.refine_profiles`. Only GPUs running exactly one pod count:
a reading of a shared GPU already contains the interference the model is meant to predict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from admission.agent.schema import ANNOTATION_USAGE, NodeSchemaError
from solver.interference import UtilisationSample


def usage_from_annotation(raw: str) -> dict[int, tuple[float, float]]:
    """GPU index -> (SM busy, memory busy) as fractions, for GPUs with both readings."""
    try:
        rows = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise NodeSchemaError(f"{ANNOTATION_USAGE}: not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(rows, list):
        raise NodeSchemaError(f"{ANNOTATION_USAGE}: must be a JSON list")
    out: dict[int, tuple[float, float]] = {}
    for i, row in enumerate(rows):
        where = f"{ANNOTATION_USAGE}[{i}]"
        if not isinstance(row, Mapping):
            raise NodeSchemaError(f"{where}: must be an object")
        index, sm, bw = row.get("index"), row.get("sm_pct"), row.get("membw_pct")
        if not isinstance(index, int) or isinstance(index, bool):
            raise NodeSchemaError(f"{where}.index: must be an integer")
        if sm is None or bw is None:
            continue  # no reading (a MIG-enabled GPU): nothing to learn from
        for name, value in (("sm_pct", sm), ("membw_pct", bw)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not (
                    0 <= value <= 100):
                raise NodeSchemaError(f"{where}.{name}: must be a number in [0, 100]")
        out[index] = (sm / 100.0, bw / 100.0)
    return out


def solo_samples(
    usage: Mapping[int, tuple[float, float]],
    classes_on_gpu: Mapping[int, Sequence[str | None]],
) -> list[UtilisationSample]:
    """One sample per GPU that ran exactly one pod with a QoS class (``classes_on_gpu`` lists
    one entry per pod on the GPU): the reading of a GPU running two pods, even of the same
    class, is not a solo reading."""
    samples = []
    for index, classes in sorted(classes_on_gpu.items()):
        if len(classes) != 1 or index not in usage:
            continue
        (name,) = classes
        if name is None:
            continue
        sm, bw = usage[index]
        samples.append(UtilisationSample(qos_class=name, sm=sm, membw=bw))
    return samples
