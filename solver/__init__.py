"""Berth's functional core: the batch placement problem, its solvers and the one checker.

Pure: no Kubernetes client, no aiohttp, no I/O. Everything arrives in a ``Snapshot`` and leaves
as a ``Plan``.
"""
