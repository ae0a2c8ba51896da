#!/usr/bin/env python3
"""Writes the slowest transition-log segments to scan that we know of (BENCHMARKS.md,
"Reading a transition log back: crafted damage").

    python3 tools/diagnostics/log/forged_segments.py OUT_DIR MIB

OUT_DIR/forged/seg-…gwlog: a sound format-3 header, then forged frame headers every 16 bytes,
each with a correct header CRC and a 64 KiB length, whose record CRC never holds (the scan
checksums 64 KiB at each of them). OUT_DIR/v1/seg-…gwlog: a damaged header and the bytes
00 00 01 00 repeated, read as format-1 frames of 64 KiB at every fourth byte. Only a writer
that forges checksums makes either: random damage does not pass the header CRC.
"""
import os, struct, sys, zlib

out, mib = sys.argv[1], int(sys.argv[2])
size = mib * 1024 * 1024
name = "seg-" + "0" * 20 + ".gwlog"

head = b"GWTL" + struct.pack("<HHQQ", 3, 28, 0, 1)
head += struct.pack("<I", zlib.crc32(head))
frame = b"\x9eGWR" + struct.pack("<II", 65536, 0)
frame += struct.pack("<I", zlib.crc32(frame))
segments = {
    "forged": head + frame * ((size - 28) // 16),
    "v1": b"\x00" * 28 + b"\x00\x00\x01\x00" * ((size - 28) // 4),
}
for kind, data in segments.items():
    os.makedirs(os.path.join(out, kind), exist_ok=True)
    with open(os.path.join(out, kind, name), "wb") as f:
        f.write(data)
