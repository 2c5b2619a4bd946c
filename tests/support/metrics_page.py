"""One service's /metrics page over HTTP, parsed: what a Prometheus scrape of the process
would read."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One /metrics page, parsed: samples by (name, labels)."""

    def __init__(self, text: str) -> None:
        self.types: dict[str, str] = {}
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples.append((sample.name, sample.labels, sample.value))

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels``."""
        return sum(
            value
            for sample, have, value in self.samples
            if sample == name and all(have.get(k) == v for k, v in labels.items())
        )

    def labels_of(self, name: str, label: str) -> set[str]:
        return {have[label] for sample, have, _ in self.samples if sample == name and label in have}


def scrape(address: str) -> Scrape:
    reply = httpx.get(f"http://{address}/metrics", timeout=10)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    return Scrape(reply.text)
