"""Tokenizer: renders conversations into gpt-oss harmony tokens (o200k vocabulary)."""
