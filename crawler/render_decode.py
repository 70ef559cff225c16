"""The body of a browser request's response, decoded with its size bounded at every step.

httpx's own decoding (``aiter_bytes``) turns each network chunk into all of its decoded bytes at once: an
841-byte brotli body became 1 GiB in one step, before any size cap could look at it. Here the raw bytes are
decoded by zlib with ``max_length``, so no step yields more than the bytes still allowed; only gzip and deflate
are decoded (the request asks for nothing else), and any other ``Content-Encoding`` (brotli, zstd, unknown,
several stacked) is refused rather than decoded without a bound.
"""

from __future__ import annotations

import zlib

# The most one decompress step yields when there is no cap (crawl.max_bytes 0): memory grows by steps, not at once.
_STEP = 1 << 20
# What the request asks servers for: what this module can decode with a bound.
ACCEPT_ENCODING = "gzip, deflate"
_WBITS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


class Over(Exception):
    """More decoded (or raw) bytes than the cap allows."""


class Unsupported(Exception):
    """A Content-Encoding not decoded here; the words name it."""


class Undecodable(Exception):
    """A gzip or deflate body that is not one; the words say which."""


def codings(header: str) -> list[str]:
    """The content codings a ``Content-Encoding`` value names, in order, without ``identity``."""
    return [c.strip().lower() for c in header.split(",") if c.strip() and c.strip().lower() != "identity"]


class BoundedDecoder:
    """Feed raw chunks, get decoded bytes; raises :class:`Over` as soon as the output would pass ``limit``
    (0: no limit), :class:`Unsupported` on the first byte of a body in an encoding not decoded here."""

    def __init__(self, content_encoding: str, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.names = codings(content_encoding)
        self.wbits = _WBITS.get(self.names[0]) if len(self.names) == 1 else None
        self.zlib = zlib.decompressobj(self.wbits) if self.wbits is not None else None
        self.started = False

    def feed(self, data: bytes) -> bytes:
        if not data:
            return b""
        if not self.names:
            return self._count(data)
        if self.zlib is None:
            raise Unsupported(f"Content-Encoding {', '.join(self.names)!r}, which is not decoded (only gzip and "
                              "deflate are, their decoded size bounded by crawl.max_bytes)")
        first, self.started = not self.started, True
        try:
            return self._inflate(data)
        except zlib.error as exc:
            if first and self.wbits == zlib.MAX_WBITS and self.size == 0:
                # "deflate" sent as a raw stream, without the zlib wrapper (as browsers and httpx accept).
                self.wbits, self.zlib = -zlib.MAX_WBITS, zlib.decompressobj(-zlib.MAX_WBITS)
                return self._inflate(data)
            raise Undecodable(f"{self.names[0]} body that does not decode ({exc})") from None

    def finish(self) -> bytes:
        if self.zlib is None:
            return b""
        try:
            tail = self._count(self.zlib.flush())
        except zlib.error as exc:
            raise Undecodable(f"{self.names[0]} body that does not decode ({exc})") from None
        if self.started and not self.zlib.eof:  # a stream cut short would pass as a shorter, complete body
            raise Undecodable(f"{self.names[0]} body cut short (the stream does not end)")
        return tail

    def _inflate(self, data: bytes) -> bytes:
        assert self.zlib is not None
        out = []
        while data:
            room = min(_STEP, self.limit - self.size + 1) if self.limit else _STEP
            # max_length >= 1 and output full whenever input is left over, so each turn makes progress.
            out.append(self._count(self.zlib.decompress(data, room)))
            data = self.zlib.unconsumed_tail
        return b"".join(out)

    def _count(self, piece: bytes) -> bytes:
        self.size += len(piece)
        if self.limit and self.size > self.limit:
            raise Over()
        return piece
