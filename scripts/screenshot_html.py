#!/usr/bin/env python3
"""Screenshot an HTML file with headless Chromium; fail if the picture is missing or blank.

    python scripts/screenshot_html.py report.html --out report.png [--width 1280 --height 2000]

Checks that a trainmedic HTML report renders in a real browser with no network: Chromium runs
with a fresh profile and background networking, sync and component updates off. Exit status:
0 rendered and not blank; 1 screenshot missing or blank; 2 no chromium binary or bad arguments.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def png_rows(path: Path) -> tuple[int, int, Iterator[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes): width, height and
    a generator of RGB rows, decoded lazily (the blank check stops early on a real page)."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file")
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour type {ctype})")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp

    def rows() -> Iterator[bytes]:
        prev = bytearray(stride)
        for y in range(height):
            f = raw[y * (stride + 1)]
            line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
            if f == 2:
                line = bytearray((x + b) & 0xFF for x, b in zip(line, prev, strict=True))
            elif f:
                for i in range(stride):
                    a = line[i - bpp] if i >= bpp else 0
                    b = prev[i]
                    if f == 1:
                        line[i] = (line[i] + a) & 0xFF
                    elif f == 3:
                        line[i] = (line[i] + (a + b) // 2) & 0xFF
                    elif f == 4:
                        c = prev[i - bpp] if i >= bpp else 0
                        p = a + b - c
                        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                        pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                        line[i] = (line[i] + pred) & 0xFF
            prev = line
            yield bytes(line) if bpp == 3 else bytes(
                v for j, v in enumerate(line) if j % 4 != 3)

    return width, height, rows()


def blank_reason(path: Path) -> str | None:
    """Why the screenshot looks blank, or None when it shows content.

    Samples every 4th row and every 2nd pixel; content means at least 8 distinct colours and
    at least 0.5% of the sampled pixels differing from the top-left (background) pixel. Rows
    are decoded top down and the check stops as soon as both hold.
    """
    width, height, rows = png_rows(path)
    if width == 0 or height == 0:
        return "empty image"
    total = ((height + 3) // 4) * ((width + 1) // 2)
    need = max(1, int(total * 0.005))
    colours: set[bytes] = set()
    background: bytes | None = None
    differing = 0
    for y, row in enumerate(rows):
        if background is None:
            background = row[:3]
        if y % 4:
            continue
        for x in range(0, len(row), 3 * 2):
            px = row[x:x + 3]
            colours.add(px)
            differing += px != background
        if len(colours) >= 8 and differing >= need:
            return None
    if len(colours) < 8:
        return f"only {len(colours)} distinct colours"
    return f"only {differing} of {total} sampled pixels differ from the background"


def screenshot(html: Path, out: Path, *, width: int = 1280, height: int = 2000,
               chromium: str | None = None,
               timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    binary = chromium or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium binary on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="trainmedic-chromium-") as profile:
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
               f"--screenshot={out.resolve()}", f"--window-size={width},{height}",
               html.resolve().as_uri()]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html", type=Path, help="the HTML file to render")
    ap.add_argument("--out", type=Path, default=None, help="PNG to write (default: next to it)")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=2000)
    args = ap.parse_args(argv)
    if not args.html.is_file():
        print(f"error: {args.html}: no such file (expected an HTML report)", file=sys.stderr)
        return 2
    out = args.out or args.html.with_suffix(".png")
    out.unlink(missing_ok=True)
    try:
        proc = screenshot(args.html, out, width=args.width, height=args.height)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except subprocess.TimeoutExpired:
        print("error: chromium did not finish in time", file=sys.stderr)
        return 1
    if not out.is_file() or out.stat().st_size == 0:
        print(f"error: no screenshot written (chromium exit {proc.returncode}):\n"
              f"{proc.stderr[-2000:]}", file=sys.stderr)
        return 1
    reason = blank_reason(out)
    if reason:
        print(f"error: {out}: screenshot looks blank ({reason})", file=sys.stderr)
        return 1
    print(f"{out}: {out.stat().st_size:,} bytes, rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
