"""HTML plan report: self-contained, charts by cluster / purchase model / storage tier, and it
renders in real headless Chromium (screenshot)."""
from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser

from infra.planner.html import render_html
from tests.test_diff import PROD, T_ASG, make_plan
from tests.tools import require_tool


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rects, self.attrs_with_urls = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "rect" and "data-value" in a:
            self.rects.append(float(a["data-value"]))
        for k, v in attrs:
            if k == "xmlns":  # a namespace name, never fetched
                continue
            if k in ("src", "href") or (v and re.match(r"(?i)\s*(https?:)?//", v)):
                self.attrs_with_urls.append((tag, k, v))


def test_page_is_self_contained_and_has_the_three_charts():
    page = render_html(PROD)
    p = _Collect()
    p.feed(page)
    assert p.attrs_with_urls == []                     # no external fetches
    assert "<script" not in page and "@import" not in page and "url(" not in page
    for chart in ("by-cluster", "by-purchase-model", "by-storage-tier", "budget"):
        assert f'id="{chart}"' in page, chart
    # by cluster: train 1500, infer 200, shared 46.5; purchase models 900/300; tiers 40/6.5
    assert sorted(p.rects) == sorted([1500.0, 200.0, 46.5, 900.0, 300.0, 40.0, 6.5])
    assert '<span id="catalog-version">2026-01</span>' in page
    assert 'id="total">$1,746.50<' in page and 'id="headroom">$3,253.50<' in page


def test_over_budget_and_violations_are_shown_and_escaped():
    plan = make_plan("prod", [(T_ASG, "<b>x</b>", "train", 9000.0)], budget=5000.0)
    plan["violations"] = [{"policy": "budget-cap", "level": "mandatory", "resource": "",
                           "message": "tagged monthly cost $9,000.00 exceeds the budget"}]
    page = render_html(plan)
    assert "Over budget by" in page and 'class="over" id="headroom">$4,000.00<' in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert 'class="viol-mandatory">mandatory' in page and "(stack)" in page


def test_renders_in_headless_chromium(tmp_path):
    chromium = require_tool("chromium", "chromium-browser")
    src = tmp_path / "report.html"
    src.write_text(render_html(PROD), encoding="utf-8")
    png = tmp_path / "out.png"
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1280,1400", f"--screenshot={png}",
         src.as_uri()], capture_output=True, text=True, timeout=120)
    assert png.exists() and png.stat().st_size > 10_000, proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # The page drew coloured bars: the palette's blue (#0072B2) appears in the pixels.
    import zlib

    width = int.from_bytes(data[16:20], "big")
    idat, pos = b"", 8
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    bpp = 4 if data[25] == 6 else 3
    stride = width * bpp + 1
    # Unfiltered rows are rare; count exact blue pixels after undoing PNG filters.
    pixels = _unfilter(raw, width, bpp)
    blue = sum(1 for i in range(0, len(pixels), bpp) if pixels[i:i + 3] == b"\x00\x72\xb2")
    assert blue > 500, f"no chart bars drawn ({blue} blue pixels)"
    assert stride > 0


def _unfilter(raw: bytes, width: int, bpp: int) -> bytes:
    stride = width * bpp
    out = bytearray()
    prev = bytearray(stride)
    pos = 0
    while pos < len(raw):
        f = raw[pos]
        line = bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pr) & 0xFF
        out += line
        prev = line
    return bytes(out)
