"""Just enough PNG decoding to count a screenshot's pixels (8-bit RGB/RGBA, not interlaced)."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {2: 3, 6: 4}  # colour type → bytes per pixel (RGB, RGBA)


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]

    def pixels(self) -> list[tuple[int, int, int]]:
        step = self.channels
        return [
            (row[i], row[i + 1], row[i + 2]) for row in self.rows for i in range(0, len(row), step)
        ]


def decode(data: bytes) -> Image:
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    offset, header, compressed = len(SIGNATURE), b"", bytearray()
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        chunk = data[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IHDR":
            header = chunk
        elif kind == b"IDAT":
            compressed += chunk
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}")
    channels = CHANNELS[colour]
    raw = zlib.decompress(bytes(compressed))
    stride = width * channels
    rows: list[bytes] = []
    previous = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(kind, line, previous, channels)
        rows.append(bytes(line))
        previous = bytes(line)
    return Image(width, height, channels, rows)


def _unfilter(kind: int, line: bytearray, above: bytes, bpp: int) -> None:
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = above[i]
        upper_left = above[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            line[i] = (line[i] + _paeth(left, up, upper_left)) & 0xFF


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c
