"""Imageres: resolves input images (decode, size, detail, token cost); legacy proxy hop."""
