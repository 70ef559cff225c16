"""Small, real PDF files written by hand for the tests: text pages (Helvetica), an outline, a scan-like page
of only an image, and encryption (the standard security handler, RC4 40-bit, revision 2), so that no
PDF-writing library is needed. pdfminer.six reads them as it reads any PDF.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

# PDF 1.7, 7.6.3.3: the padding string of the standard security handler.
_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


@dataclass(frozen=True)
class Bookmark:
    level: int  # 1 = top level
    title: str
    page: int  # 1-based


def _rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def _escape(text: str) -> bytes:
    return text.encode("cp1252").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _content(paragraphs: Sequence[str], header: str | None) -> bytes:
    """A page's content stream: each paragraph wrapped at 90 characters, a blank line between paragraphs."""
    out = [b"BT", b"/F1 10 Tf", b"14 TL", b"72 760 Td"]
    if header is not None:
        out += [b"(" + _escape(header) + b") Tj", b"T* T*"]
    for paragraph in paragraphs:
        for line in textwrap.wrap(paragraph, 90, break_on_hyphens=False) or [""]:
            out.append(b"(" + _escape(line) + b") Tj T*")
        out.append(b"T*")
    out.append(b"ET")
    return b"\n".join(out)


def make_pdf(pages: Sequence[Sequence[str]], *, outline: Sequence[Bookmark] = (), title: str | None = None,
             header: str | None = None, image_pages: bool = False, user_password: str | None = None) -> bytes:
    """A PDF of ``pages`` (each a list of paragraphs), with an outline, a running ``header`` line on every
    page, or (``image_pages``) pages holding only an image and no text; ``user_password`` encrypts it."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")
    pages_obj = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    image = add(b"") if image_pages else 0
    page_ids: list[int] = []
    streams: dict[int, bytes] = {}
    for number, paragraphs in enumerate(pages, start=1):
        if image_pages:
            content = b"q 400 0 0 500 100 150 cm /Im1 Do Q"
            resources = f"<< /XObject << /Im1 {image} 0 R >> >>".encode()
        else:
            content = _content(paragraphs, None if header is None else f"{header} {number}")
            resources = f"<< /Font << /F1 {font} 0 R >> >>".encode()
        stream_id = add(b"")
        streams[stream_id] = content
        page_ids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources %s /Contents %d 0 R >>"
                            % (pages_obj, resources, stream_id)))
    if image_pages:
        pixels = bytes((x * 7 + y * 3) % 256 for y in range(50) for x in range(40))
        streams[image] = pixels
    kids = " ".join(f"{p} 0 R" for p in page_ids)
    objects[pages_obj - 1] = f"<< /Type /Pages /Kids [{kids}] /Count {len(page_ids)} >>".encode()
    outlines = _outline(objects, outline, page_ids) if outline else 0
    objects[catalog - 1] = (b"<< /Type /Catalog /Pages %d 0 R" % pages_obj
                            + (b" /Outlines %d 0 R /PageMode /UseOutlines" % outlines if outlines else b"") + b" >>")
    info = add(b"<< /Title (" + _escape(title) + b") >>") if title else 0
    file_id = hashlib.md5(b"webqa test pdf" + bytes(len(pages))).digest()
    encrypt, key = (0, b"")
    if user_password is not None:
        encrypt, key = _encryption(objects, user_password, file_id)

    def crypt(number: int, data: bytes) -> bytes:
        if not key or number == encrypt:
            return data
        object_key = hashlib.md5(key + number.to_bytes(3, "little") + b"\0\0").digest()[: len(key) + 5]
        return _rc4(object_key, data)

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        if number in streams:
            data = crypt(number, streams[number])
            extra = b" /Type /XObject /Subtype /Image /Width 40 /Height 50 /ColorSpace /DeviceGray /BitsPerComponent 8" \
                if number == image else b""
            body = b"<< /Length %d%s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"
        elif key and number != encrypt:
            body = _encrypt_strings(body, lambda raw, n=number: crypt(n, raw))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"<< /Size %d /Root %d 0 R /ID [<%s> <%s>]" % (len(objects) + 1, catalog, file_id.hex().encode(),
                                                            file_id.hex().encode())
    trailer += (b" /Info %d 0 R" % info if info else b"") + (b" /Encrypt %d 0 R" % encrypt if encrypt else b"") + b" >>"
    out += b"trailer\n" + trailer + b"\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def _outline(objects: list[bytes], bookmarks: Sequence[Bookmark], page_ids: Sequence[int]) -> int:
    """Outline objects for ``bookmarks`` (levels nest under the previous shallower entry); the root's id."""
    root = len(objects) + 1
    objects.append(b"")
    ids = [root + 1 + i for i in range(len(bookmarks))]
    objects.extend(b"" for _ in bookmarks)
    parents: list[int] = []
    children: dict[int, list[int]] = {root: []}
    for index, mark in enumerate(bookmarks):
        parent = root
        for earlier in range(index - 1, -1, -1):
            if bookmarks[earlier].level < mark.level:
                parent = ids[earlier]
                break
        parents.append(parent)
        children.setdefault(parent, []).append(ids[index])
        children.setdefault(ids[index], [])
    for index, mark in enumerate(bookmarks):
        own, siblings = ids[index], children[parents[index]]
        position = siblings.index(own)
        fields = [b"/Title (" + _escape(mark.title) + b")", b"/Parent %d 0 R" % parents[index],
                  b"/Dest [%d 0 R /XYZ 0 792 0]" % page_ids[mark.page - 1]]
        if position:
            fields.append(b"/Prev %d 0 R" % siblings[position - 1])
        if position + 1 < len(siblings):
            fields.append(b"/Next %d 0 R" % siblings[position + 1])
        if children[own]:
            fields.append(b"/First %d 0 R /Last %d 0 R /Count %d" % (children[own][0], children[own][-1], len(children[own])))
        objects[own - 1] = b"<< " + b" ".join(fields) + b" >>"
    top = children[root]
    objects[root - 1] = b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>" % (top[0], top[-1], len(top))
    return root


def _encryption(objects: list[bytes], user_password: str, file_id: bytes) -> tuple[int, bytes]:
    """The /Encrypt dictionary (revision 2, RC4 40-bit) appended to ``objects``; its id and the file key."""
    owner = hashlib.md5((b"owner-" + user_password.encode())[:32].ljust(32, b"\0")).digest()[:5]
    padded_user = (user_password.encode("latin-1") + _PAD)[:32]
    o_value = _rc4(owner, padded_user)
    permissions = (-4).to_bytes(4, "little", signed=True)
    key = hashlib.md5(padded_user + o_value + permissions + file_id).digest()[:5]
    u_value = _rc4(key, _PAD)
    objects.append(b"<< /Filter /Standard /V 1 /R 2 /Length 40 /P -4 /O <%s> /U <%s> >>"
                   % (o_value.hex().encode(), u_value.hex().encode()))
    return len(objects), key


def _encrypt_strings(body: bytes, crypt: object) -> bytes:
    """A dictionary with its literal strings encrypted (written as hex strings)."""
    out = bytearray()
    i = 0
    while i < len(body):
        if body[i:i + 1] == b"(":
            depth, j, raw = 1, i + 1, bytearray()
            while depth:
                char = body[j:j + 1]
                if char == b"\\":
                    raw += body[j + 1:j + 2]
                    j += 2
                    continue
                depth += char == b"("
                depth -= char == b")"
                if depth:
                    raw += char
                j += 1
            out += b"<" + crypt(bytes(raw)).hex().encode() + b">"  # type: ignore[operator]
            i = j
        else:
            out += body[i:i + 1]
            i += 1
    return bytes(out)


# A three-page manual with an outline: the PDF the tests crawl and cite.
def prose_about(topic: str, fact: str) -> list[str]:
    """Two paragraphs about ``topic``, long enough to be a chunk of their own, the second holding ``fact``."""
    return [f"This part of the Lumen manual is about {topic}. It explains every step in the order a technician "
            f"follows on site, with the tools and parts each step needs, so that nothing has to be looked up "
            f"elsewhere while the ladder is still up against the wall.",
            f"{fact} Keep this page with the controller in case the installation has to be checked again later."]


MANUAL = [
    ["Lumen Manual", *prose_about("the controller", "The Lumen controller drives up to eight lamps on one bus.")],
    ["Installation", *prose_about("installation", "The controller needs a supply of twelve volts and a wall bracket.")],
    ["Troubleshooting", *prose_about("faults", "An orange light that blinks three times means the supply voltage is too low.")],
]
OUTLINE = [Bookmark(1, "Lumen Manual", 1), Bookmark(2, "Installation", 2), Bookmark(2, "Troubleshooting", 3)]
