"""Prometheus text for metric families built at request time (dcgm-exporter's ``/metrics``,
``/v1/loads?format=prometheus``): prometheus_client's own exposition, as the simulated SGLang ``/metrics``
uses, so names, HELP texts and label values are escaped the one way the parsers expect."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def exposition(families: Iterable[Metric]) -> bytes:
    """The text format (``text/plain; version=0.0.4``) of ``families``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)
