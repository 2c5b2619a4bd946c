"""Where responses, conversations and caches are kept: in process, or in Redis."""
