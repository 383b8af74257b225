"""The GPU node agent: reads each GPU through NVML and publishes what the controller's inventory
needs as node labels and annotations (schema in docs/node-labels.md).

Split so that almost everything is pure and testable against a fake NVML:
:mod:`.inventory` reads an NVML-like object into plain dataclasses, :mod:`.metadata` turns an
inventory into labels and annotations, :mod:`.publisher` patches the node only when they change,
and :mod:`.loop` ties them together at a bounded rate.
"""
