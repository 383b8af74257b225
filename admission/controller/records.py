"""The leader's records, saved in a ConfigMap so that a new leader carries on with them.

What: :class:`solver.records.Records`, what the controller remembers from one batch window to
the next (each tenant's GPUs held and due, averaged with a half-life; the learned target
workload). Without a saved copy a leader change starts them over, and a tenant owed GPUs for
the last hour is owed nothing from the new leader's first window.

Where: the ConfigMap ``berth-records`` (key ``records.json``) in Berth's own namespace. Berth's
RBAC lets it create ConfigMaps there and read and update that one by name; tenants have no
rights in Berth's namespace, so only Berth and the cluster's admins write it.

When: the leader saves after a batch cycle once ``batch.recordsSaveSeconds`` (60 s) have passed
since its last save; a replica that becomes leader reads the ConfigMap before its first batch
cycle. Updates carry the resourceVersion last read or written, so a write based on a stale read
is refused (and the record re-read); a replica writes only while it holds the Lease.

Trust: the saved form is read back with every field and bound checked
(:meth:`solver.records.Records.loads`). A form that is not one (hand-edited, another version)
is logged with the field that is wrong, counted (``berth_records_total{event="refused"}``) and
replaced by fresh records on the next save: never a crash, never a value past its bound. When
the API server cannot be read, the cycles go on with fresh records, the read is retried before
each batch cycle, and nothing is saved until it has succeeded (a saved history is never
overwritten by one that never saw it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from admission.controller.api import ApiError, ClusterApi, Conflict, Json, NotFound
from admission.controller.metrics import Metrics
from solver.records import Records

log = logging.getLogger(__name__)

CONFIG_MAP = "berth-records"
KEY = "records.json"


class RecordStore:
    """Reads and saves one ConfigMap of records; ``monotonic`` (seconds) paces the saves."""

    def __init__(self, *, api: ClusterApi, namespace: str, metrics: Metrics,
                 name: str = CONFIG_MAP, save_seconds: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.metrics = metrics
        self.save_seconds = save_seconds
        self.monotonic = monotonic
        self.loaded = False  # read (or found absent or refused) in this term of leadership
        self._rv: str | None = None  # the resourceVersion last read or written; None: absent
        self._last_save: float | None = None

    def forget(self) -> None:
        """Leadership lost: the next term reads the records again before saving."""
        self.loaded = False

    def load(self) -> Records | None:
        """The saved records, or None (absent, refused, or unreadable: see :attr:`loaded`)."""
        try:
            cm = self.api.get_config_map(self.namespace, self.name)
        except ApiError as exc:
            log.warning("records: cannot read ConfigMap %s/%s (%s); going on with fresh "
                        "records, retrying before the next batch cycle", self.namespace,
                        self.name, exc)
            self.metrics.records.labels("read_failed").inc()
            return None
        self.loaded = True
        self._last_save = self.monotonic()
        if cm is None:
            self._rv = None
            self.metrics.records.labels("absent").inc()
            return None
        self._rv = (cm.get("metadata") or {}).get("resourceVersion")
        text = (cm.get("data") or {}).get(KEY)
        try:
            if not isinstance(text, str):
                raise ValueError(f"records: the ConfigMap has no data key {KEY!r}")
            records = Records.loads(text)
        except ValueError as exc:
            log.warning("records: ConfigMap %s/%s refused: %s; starting fresh records, which "
                        "replace it at the next save", self.namespace, self.name, exc)
            self.metrics.records.labels("refused").inc()
            return None
        self.metrics.records.labels("restored").inc()
        log.info("records: restored from ConfigMap %s/%s", self.namespace, self.name)
        return records

    def due(self) -> bool:
        return self.loaded and (self._last_save is None
                                or self.monotonic() - self._last_save >= self.save_seconds)

    def save(self, records: Records, may_write: Callable[[], bool]) -> bool:
        """Write ``records`` when a save is due and this replica may write; True if written."""
        if not self.due() or not may_write():
            return False
        self._last_save = self.monotonic()
        body: Json = {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": self.name, "namespace": self.namespace,
                                   "labels": {"app.kubernetes.io/part-of": "berth"}},
                      "data": {KEY: records.dumps()}}
        try:
            if self._rv is None:
                out = self.api.create_config_map(self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = self._rv
                out = self.api.replace_config_map(self.namespace, self.name, body)
        except (Conflict, NotFound) as exc:
            # written or deleted by someone else since it was read: read it again before any
            # save (a leader that lost the Lease stops here; one that kept it re-reads)
            log.warning("records: ConfigMap %s/%s changed since it was read (%s); reading it "
                        "again before saving", self.namespace, self.name, exc)
            self.metrics.records.labels("save_failed").inc()
            self.loaded = False
            return False
        except ApiError as exc:
            log.warning("records: cannot save ConfigMap %s/%s (%s); retrying at the next "
                        "save", self.namespace, self.name, exc)
            self.metrics.records.labels("save_failed").inc()
            return False
        self._rv = (out.get("metadata") or {}).get("resourceVersion")
        self.metrics.records.labels("saved").inc()
        return True
