"""Reading this process's metrics in tests. Counters and histograms are process-global, so a
test compares a sample before and after its own work."""

from __future__ import annotations

from prometheus_client import REGISTRY


def sample(name: str, **labels: str) -> float:
    """A sample's value now (0 for a series nothing has recorded into yet)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """One sample, read when created; ``change`` is how much it moved since."""

    def __init__(self, name: str, **labels: str) -> None:
        self.name = name
        self.labels = labels
        self.start = sample(name, **labels)

    @property
    def change(self) -> float:
        return sample(self.name, **self.labels) - self.start
