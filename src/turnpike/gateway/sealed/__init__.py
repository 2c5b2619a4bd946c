"""Opaque blobs only this server can open: sealing, encrypted reasoning, compaction."""
