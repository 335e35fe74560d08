#!/usr/bin/python3
"""Checks of a training report (deploy/report/report.py) for its tests.

    report_check.py REPORT.html --ranks=0,1 [--result]

Checks that every image the report draws exists beside the HTML, is a well-formed PNG (the
signature, an IHDR first with a width and height above 0, every chunk's CRC, IDAT data that
inflates to exactly the rows IHDR announces, an IEND last), is not tiny, has drawn content (not
one flat colour), and shows one line per worker rank in both panels (the worker's colour in the
"over steps" half and in the "over time" half); that the HTML references each image; and, with
--result, that the HTML holds the RESULT table with the figures of worker 0's RESULT line (read
from the run folder named in the page). Prints what it checked; exits 1 on the first failure.
"""

import argparse
import json
import os
import re
import struct
import sys
import zlib

# The images report.py draws, by metric (report.PLOTS).
METRICS = ("loss", "auc", "samples_per_s", "pull_ms", "push_ms")
# matplotlib's default colour cycle ("tab10"): worker k's line is colour k.
TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
         "#7f7f7f", "#bcbd22", "#17becf"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Samples per pixel of each PNG colour type.
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


class CheckError(Exception):
    pass


def check_png(path, min_bytes=2000):
    """Walks a PNG's chunks; returns (width, height). Raises CheckError on any defect."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < min_bytes:
        raise CheckError("%s: %d bytes, below %d: an empty or tiny image" % (path, len(data), min_bytes))
    if data[:8] != PNG_SIGNATURE:
        raise CheckError("%s: no PNG signature" % path)
    pos = 8
    chunks = []
    idat = []
    while pos < len(data):
        if pos + 8 > len(data):
            raise CheckError("%s: a chunk header cut at byte %d" % (path, pos))
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 8 + length + 4
        if end > len(data):
            raise CheckError("%s: chunk %r runs past the end of the file" % (path, kind))
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[end - 4:end])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise CheckError("%s: chunk %r has a wrong CRC" % (path, kind))
        chunks.append((kind, body))
        if kind == b"IDAT":
            idat.append(body)
        pos = end
        if kind == b"IEND":
            break
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise CheckError("%s: the first chunk is not a 13-byte IHDR" % path)
    if chunks[-1][0] != b"IEND":
        raise CheckError("%s: no IEND chunk at the end" % path)
    if pos != len(data):
        raise CheckError("%s: %d bytes after IEND" % (path, len(data) - pos))
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if width == 0 or height == 0:
        raise CheckError("%s: IHDR says %dx%d" % (path, width, height))
    if color not in _CHANNELS or interlace != 0:
        raise CheckError("%s: colour type %d, interlace %d: not what matplotlib writes"
                         % (path, color, interlace))
    if not idat:
        raise CheckError("%s: no IDAT chunk" % path)
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise CheckError("%s: the IDAT data does not inflate: %s" % (path, e))
    row = (width * _CHANNELS[color] * depth + 7) // 8 + 1
    if len(raw) != row * height:
        raise CheckError("%s: IDAT inflates to %d bytes, IHDR's %dx%d needs %d"
                         % (path, len(raw), width, height, row * height))
    return width, height


def _hex_to_rgb(color):
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def check_drawn(path, ranks):
    """The image has content, and each rank's colour in both halves (the two panels)."""
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    pixels = (mpimg.imread(path)[:, :, :3] * 255).round().astype(np.int16)
    height, width, _ = pixels.shape
    not_white = np.any(pixels < 250, axis=2).mean()
    if not 0.01 < not_white < 0.9:
        raise CheckError("%s: %.1f%% of the pixels are not white: not a drawn plot"
                         % (path, 100 * not_white))
    halves = (("over steps", pixels[:, :width // 2]), ("over time", pixels[:, width // 2:]))
    for rank in ranks:
        rgb = np.array(_hex_to_rgb(TAB10[rank % len(TAB10)]), dtype=np.int16)
        for name, half in halves:
            count = int(np.all(np.abs(half - rgb) <= 3, axis=2).sum())
            if count < 20:
                raise CheckError("%s: worker %d's colour %s in %d pixels of the %s panel: its "
                                 "line is missing" % (path, rank, TAB10[rank % len(TAB10)], count, name))


def check_report(html_path, ranks, expect_result):
    """Every check above on the report at html_path. Returns a list of what was checked."""
    done = []
    with open(html_path, encoding="utf-8") as f:
        page = f.read()
    if not page.lstrip().startswith("<!DOCTYPE html>") or "</html>" not in page:
        raise CheckError("%s: not a whole HTML page" % html_path)
    folder = os.path.dirname(os.path.abspath(html_path))
    stem = os.path.splitext(os.path.basename(html_path))[0]
    for metric in METRICS:
        name = "%s_%s.png" % (stem, metric)
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise CheckError("%s: missing" % path)
        width, height = check_png(path)
        if width < 400 or height < 150:
            raise CheckError("%s: %dx%d pixels, too small for two panels" % (path, width, height))
        check_drawn(path, ranks)
        if 'src="%s"' % name not in page:
            raise CheckError("%s does not show %s" % (html_path, name))
        done.append("%s: PNG %dx%d, %d bytes, a line per worker %s in both panels, shown by the page"
                    % (name, width, height, os.path.getsize(path), ",".join(map(str, ranks))))
    if expect_result:
        done += _check_result(page, html_path)
    return done


def _check_result(page, html_path):
    m = re.search(r"Run folder: <code>([^<]*)</code>", page)
    if not m:
        raise CheckError("%s: no run folder named" % html_path)
    run_dir = _unescape(m.group(1))
    log = os.path.join(run_dir, "logs", "worker0.log")
    with open(log, encoding="utf-8") as f:
        lines = [l for l in f if l.startswith("RESULT ")]
    if not lines:
        raise CheckError("%s: no RESULT line, so nothing to compare" % log)
    result = json.loads(lines[-1][len("RESULT "):])
    table = re.search(r'<table id="result">(.*?)</table>', page, re.S)
    if not table:
        raise CheckError("%s: no RESULT table" % html_path)
    rows = dict((_unescape(k), _unescape(v)) for k, v in re.findall(
        r'<tr><td class="k">([^<]*)</td><td>([^<]*)</td></tr>', table.group(1)))
    checked = []
    for key in ("heldout_auc", "heldout_logloss", "samples_per_s", "steps", "workers", "servers"):
        if key not in result:
            raise CheckError("%s: worker 0's RESULT has no %s" % (log, key))
        if key not in rows:
            raise CheckError("%s: the RESULT table has no %s" % (html_path, key))
        want, got = result[key], rows[key]
        if isinstance(want, float):
            ok = abs(float(got) - want) <= 1e-5 * max(1.0, abs(want))
        else:
            ok = got == str(want)
        if not ok:
            raise CheckError("%s: RESULT %s is %s in the table, %r in %s" % (html_path, key, got, want, log))
        checked.append("%s=%s" % (key, got))
    return ["the RESULT table matches worker 0's log: " + ", ".join(checked)]


def _unescape(text):
    import html
    return html.unescape(text)


def main():
    parser = argparse.ArgumentParser(prog="report_check.py")
    parser.add_argument("html")
    parser.add_argument("--ranks", default="0", help="the worker ranks the plots must show")
    parser.add_argument("--result", action="store_true", help="check the RESULT table too")
    args = parser.parse_args()
    try:
        for line in check_report(args.html, [int(r) for r in args.ranks.split(",")], args.result):
            print("ok: " + line)
    except (CheckError, OSError, ValueError) as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
