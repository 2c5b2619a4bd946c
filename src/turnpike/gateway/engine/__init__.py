"""The transport-independent core: one create request in, a stream of events out."""
