"""MariaDB's compressed binlog events (``log_bin_compress=ON``) back to the events they compress.

A source with ``log_bin_compress`` writes a query or row event whose statement text or rows are at least
``log_bin_compress_min_len`` bytes as a compressed event: the same header and post-header, then a
compressed record in place of the text or the rows. :func:`inflate_event` turns it into the event the
server would have written without compression, exactly as MariaDB's own replicas and mariadb-binlog do
(``query_event_uncompress`` and ``row_log_event_uncompress`` of sql/log_event.cc), so everything after
the reader (the library's parse, the compiled decoders' raw row bytes) sees an ordinary event.

A compressed record is one header byte (bit 7 set; bits 4-6 the algorithm, 0 = zlib, the only one
MariaDB has; bits 0-2 how many bytes the uncompressed length takes, 1 to 4), that length big-endian,
then the zlib stream.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

HEADER_LEN = 19  # the common header of every event: timestamp, type, server_id, length, next position, flags
QUERY_EVENT, QUERY_COMPRESSED_EVENT = 2, 165
ROWS_HEADER_LEN_V1, ROWS_HEADER_LEN_V2 = 8, 10
# compressed type -> the type it compresses. MariaDB 10.11 writes the v1 forms (166-168) for its
# v1 row events (23-25); 169-171 compress the v2 row events (30-32), which have a variable-length header.
UNCOMPRESSED_TYPE = {
    QUERY_COMPRESSED_EVENT: QUERY_EVENT,
    166: 23, 167: 24, 168: 25,  # Write/Update/Delete_rows_compressed_v1 -> Write/Update/Delete_rows_v1
    169: 30, 170: 31, 171: 32,  # Write/Update/Delete_rows_compressed (v2) -> Write/Update/Delete_rows_v2
}
_UPDATES = (24, 31)  # update row events carry two columns-present bitmaps
_DEFAULT_POST_HEADER = {QUERY_COMPRESSED_EVENT: 13, 166: 8, 167: 8, 168: 8, 169: 10, 170: 10, 171: 10}


class CompressedEventError(ValueError):
    """A compressed event that cannot be decompressed: the reason, and (set by the stream that read it)
    the event's header and, for a row event, its table id, for the reader's named error."""

    header: Any = None
    table_id: int | None = None


def inflate_record(record: bytes) -> bytes:
    """The bytes a compressed record (header byte, length, zlib stream) holds."""
    if not record:
        raise CompressedEventError("the compressed record is empty")
    head = record[0]
    length_bytes, algorithm = head & 0x07, (head >> 4) & 0x07
    if not head & 0x80:
        raise CompressedEventError(f"its record header byte 0x{head:02x} lacks the compressed flag (0x80)")
    if algorithm != 0:
        raise CompressedEventError(f"it names compression algorithm {algorithm}; MariaDB defines only 0 (zlib)")
    if not 1 <= length_bytes <= 4 or len(record) < 1 + length_bytes:
        raise CompressedEventError(f"its record header byte 0x{head:02x} gives no valid uncompressed length")
    length = int.from_bytes(record[1:1 + length_bytes], "big")
    try:
        data = zlib.decompress(record[1 + length_bytes:])
    except zlib.error as exc:
        raise CompressedEventError(f"its zlib stream is damaged ({exc})") from None
    if len(data) != length:
        raise CompressedEventError(f"it inflates to {len(data)} bytes where its header says {length}")
    return data


def _packed_int(event: bytes, at: int) -> tuple[int, int]:
    """A length-encoded integer (the column count of a row event) and the offset after it."""
    first = event[at]
    if first < 251:
        return first, at + 1
    size = {252: 2, 253: 3, 254: 8}.get(first)
    if size is None:
        raise CompressedEventError(f"its column count starts with the invalid byte 0x{first:02x}")
    return int.from_bytes(event[at + 1:at + 1 + size], "little"), at + 1 + size


def _record_offset(event: bytes, kind: int, post_header_len: int) -> int:
    """Where the compressed record of an event of compressed type ``kind`` begins."""
    at = HEADER_LEN
    if kind == QUERY_COMPRESSED_EVENT:  # post-header (db name length at 8, status block length at 11), status, db\0
        db_len, status_len = event[at + 8], struct.unpack_from("<H", event, at + 11)[0]
        return at + post_header_len + status_len + db_len + 1
    at += ROWS_HEADER_LEN_V1  # table id and flags
    if post_header_len == ROWS_HEADER_LEN_V2:  # a variable-length header, its 2 length bytes included
        at += struct.unpack_from("<H", event, at)[0]
    width, at = _packed_int(event, at)
    bitmaps = 2 if UNCOMPRESSED_TYPE[kind] in _UPDATES else 1
    return at + bitmaps * ((width + 7) // 8)


def inflate_event(event: bytes, post_header_lengths: bytes | tuple[int, ...] | None, checksum: bool) -> bytes:
    """The uncompressed event for the compressed ``event`` (from its common header to its end, its CRC32
    included when ``checksum``): the same header but the uncompressed type and the new length, the same
    post-header, the text or rows inflated, and a new CRC32. ``post_header_lengths``: the format
    description's, by event type - 1 (MariaDB's defaults when there is none)."""
    kind = event[4]
    if kind not in UNCOMPRESSED_TYPE:
        raise CompressedEventError(f"event type {kind} is not a compressed event")
    if post_header_lengths is not None and len(post_header_lengths) >= kind:
        post_header_len = post_header_lengths[kind - 1]
    else:
        post_header_len = _DEFAULT_POST_HEADER[kind]
    end = len(event) - (4 if checksum else 0)
    try:
        at = _record_offset(event, kind, post_header_len)
    except (IndexError, struct.error):
        at = end
    if at >= end:
        raise CompressedEventError("it ends before its compressed record")
    body = event[:at] + inflate_record(event[at:end])
    length = len(body) + (4 if checksum else 0)
    body = body[:4] + bytes([UNCOMPRESSED_TYPE[kind]]) + body[5:9] + struct.pack("<I", length) + body[13:]
    return body + struct.pack("<I", zlib.crc32(body)) if checksum else body
