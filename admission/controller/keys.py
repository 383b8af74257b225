"""Names the controller reads and writes that :mod:`admission.constants` does not already hold.

Everything shared with the webhook (gate, tenant and gang labels, the normalised demand, the
assignment annotations read through downward-API env) comes from :mod:`admission.constants`;
only the controller's own vocabulary is defined here.
"""

from __future__ import annotations

from typing import Final

from admission import constants as c

# The pod condition every waiting pod carries, shown by ``kubectl describe pod``.
CONDITION_WAITING: Final = f"{c.DOMAIN}/Waiting"

EVENT_COMPONENT: Final = "berth-controller"

# Node fields the controller matches like labels: required node affinity's ``matchFields``
# can only name ``metadata.name``, and the release pins a pod to its node that way because the
# hostname label is not guaranteed to equal the node's name.
FIELD_NODE_NAME: Final = "metadata.name"

# Node labels the node agent and GPU Feature Discovery publish.
LABEL_GPU_MEMORY: Final = "nvidia.com/gpu.memory"  # MiB per GPU (GFD)
LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"  # GFD
