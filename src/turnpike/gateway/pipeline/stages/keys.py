"""Keys by content: how a conversation is routed when it names no parent, and how a
re-sent history finds its rendered prefix. Both ignore item ids, which a client that
sends items without one gets anew on every request."""

from __future__ import annotations

import hashlib

from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.protocol.request import CreateRequest


def conversation_key(
    tenant: str, request: CreateRequest, items: list[conversation_pb2.Item]
) -> str:
    """The routing key of a conversation that names no parent: the client's
    ``prompt_cache_key``, else a hash of how the conversation starts (instructions, tools,
    first item). A stateless client re-sending its history keeps landing on the worker
    that holds its prefix cache. Scoped by tenant: tenants never share a cache by routing."""
    if request.prompt_cache_key:
        return f"{tenant}:pck:{request.prompt_cache_key}"
    first = content_bytes(items[0]) if items else b""
    digest = hashlib.blake2b(request.header_key.encode() + first, digest_size=16).hexdigest()
    return f"{tenant}:conv:{digest}"


def content_bytes(item: conversation_pb2.Item) -> bytes:
    """An item by content only: one sent without an id gets a new id on every request."""
    bare = conversation_pb2.Item()
    bare.CopyFrom(item)
    bare.ClearField("id")
    return bare.SerializeToString(deterministic=True)


def content_keys(header: str, items: list[conversation_pb2.Item]) -> list[str]:
    """A key for each prefix of a conversation (the first item, the first two, ...), by
    content: a chained hash of the header key and each item without its id."""
    digest = hashlib.blake2b(header.encode(), digest_size=16)
    keys = []
    for item in items:
        data = content_bytes(item)
        digest.update(len(data).to_bytes(8, "little") + data)
        keys.append(f"content:{digest.hexdigest()}")
    return keys
