"""HTML plan report: self-contained, log-scale charts where small items stay visible, a budget
bar that warns from 90 %, rationale and best alternative per cluster, storage by cloud and
class; it renders in real headless Chromium (screenshot, pixel checks)."""
from __future__ import annotations

import re
import subprocess
import zlib
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from markupsafe import escape

from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT, EXIT_OK, ConfigError
from gpulease.guardrails.rules import HEADROOM_WARN_SHARE
from gpulease.planner import html as H
from gpulease.planner.html import render_html, write_html
from tests.conftest import ROOT, program_run
from tests.test_diff import PROD, T_ASG, make_plan
from tests.timeouts import HANG_S
from tests.tools import require_tool


@lru_cache(maxsize=None)
def shipped_plan(stack: str) -> dict:
    """The plan document of a shipped stack, as `gpulease plan --json` builds it."""
    from gpulease.planner.plan import build_plan

    plan = build_plan(program_run(stack), stack=stack)
    plan["source"] = f"stacks/Pulumi.{stack}.yaml"
    return plan


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rects, self.attrs_with_urls, self.texts = [], {}, [], []
        self._svg = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "svg":
            self._svg = a.get("id")
        if tag == "rect" and "data-value" in a:
            self.rects.setdefault(self._svg, []).append(
                (float(a["data-value"]), float(a["width"]), a["fill"]))
        for k, v in attrs:
            if k in ("src", "href", "xmlns") or (v and re.search(r"(?i)(https?:)?//", v)):
                self.attrs_with_urls.append((tag, k, v))

    def handle_data(self, data):
        if data.strip():
            self.texts.append(data.strip())


def parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    return p


def element(page: str, element_id: str) -> str:
    """The opening tag and text of the element with this id (up to its first closing tag)."""
    m = re.search(r'<[^>]*\bid="%s"[^>]*>[^<]*' % re.escape(element_id), page)
    assert m, element_id
    return m.group(0)


# ---- pure builders ------------------------------------------------------------------------
@pytest.mark.parametrize("values, expected", [
    ([455935.81, 1165.29], (100.0, 1e6)),     # prod's clusters: 4 decades
    ([400000.0, 200.0], (100.0, 1e6)),
    ([1000.0], (100.0, 1000.0)),               # at a decade: one more below, not a sliver
    ([2500.0, 900.0], (100.0, 1e4)),
    ([1e6, 0.001], (1.0, 1e6)),                # capped at MAX_DECADES below the top
    ([0.0, 0.0], (1.0, 10.0)),                 # nothing positive
    ([], (1.0, 10.0)),
])
def test_log_axis_table(values, expected):
    assert H.log_axis(values) == pytest.approx(expected)


def test_a_200_dollar_item_beside_400k_is_a_visible_labelled_bar():
    chart = H.bar_chart("c", "By cluster", {"train": 400000.0, "sandbox": 200.0, "idle": 0.0})
    big, small, zero = chart.bars
    assert [b.label for b in chart.bars] == ["train", "sandbox", "idle"]  # largest first
    # Linear, the $200 bar would be 200/400000 of the plot: well under one pixel.
    assert chart.plot_w * 200 / 400000 < 1
    assert small.width >= 0.07 * chart.plot_w and small.width >= 15
    assert big.width <= chart.plot_w and big.width > small.width > zero.width == 0.0
    assert small.text == "$200 · <0.1 %" and big.text.startswith("$400,000 · ")
    assert zero.text == "$0.00 · 0.0 %"
    assert [t.label for t in chart.ticks] == ["$100", "$1k", "$10k", "$100k", "$1M"]
    assert chart.ticks[0].x == 0 and chart.ticks[-1].x == pytest.approx(chart.plot_w)
    assert [b.colour for b in chart.bars] == list(H.PALETTE[:3])


def test_values_below_the_axis_still_draw_the_minimum_bar():
    chart = H.bar_chart("c", "t", {"big": 1e7, "tiny": 0.01})
    assert chart.bars[1].width == H.MIN_BAR_PX
    assert chart.bars[1].text == "$0.01 · <0.1 %"


def test_empty_chart_says_so():
    chart = H.bar_chart("c", "By storage", {})
    assert chart.bars == () and chart.subtitle == "nothing to show"


def test_labels_get_room_for_the_longest_name():
    short = H.bar_chart("c", "t", {"a": 1.0})
    long = H.bar_chart("c", "t", {"aws · DEEP_ARCHIVE": 1.0})
    assert short.plot_x == H.LABEL_WIDTH_MIN
    assert long.plot_x >= H.LABEL_PX_PER_CHAR * len("aws · DEEP_ARCHIVE")
    assert long.plot_x + long.plot_w + H.VALUE_WIDTH == long.width


@pytest.mark.parametrize("monthly, budget, level", [
    (0.0, 1000.0, "ok"),
    (899.99, 1000.0, "ok"),
    (900.0, 1000.0, "warn"),          # HEADROOM_WARN_SHARE = 90 %
    (938.0, 1000.0, "warn"),
    (1000.0, 1000.0, "warn"),
    (1000.004, 1000.0, "warn"),       # within half a cent, as the budget-cap guardrail counts
    (1000.01, 1000.0, "over"),
    (5.0, 0.0, "none"),
])
def test_budget_state_table(monthly, budget, level):
    assert HEADROOM_WARN_SHARE == 0.9
    assert H.budget_state(monthly, budget).level == level


def test_budget_bar_marks_warning_and_budget():
    under = H.budget_bar(H.budget_state(487946.68, 520000.0))
    track = under.track_w
    assert under.used_w == pytest.approx(track * 487946.68 / 520000.0, abs=0.1)
    assert under.budget_x == pytest.approx(H.BUDGET_TRACK_X + track)
    assert under.warn_x == pytest.approx(H.BUDGET_TRACK_X + 0.9 * track)
    assert under.used_label == "$487,946.68 · 93.8 % of budget"
    assert under.colour == H.STATUS_COLOUR["warn"] and under.warn_label == "90 %"
    over = H.budget_bar(H.budget_state(15000.0, 10000.0))
    assert over.used_w == pytest.approx(over.track_w)          # the total fills the track
    assert over.budget_x == pytest.approx(H.BUDGET_TRACK_X + over.track_w * 2 / 3, abs=0.1)
    assert over.colour == H.STATUS_COLOUR["over"]


@pytest.mark.parametrize("purchase, term, text", [
    ({"reserved": 8, "on_demand": 0, "spot": 0}, "1y", "8 reserved (1y)"),
    ({"reserved": 0, "on_demand": 1, "spot": 2}, None, "1 on-demand + 2 spot"),
    ({"reserved": 2, "on_demand": 1, "spot": 0}, "3y", "2 reserved (3y) + 1 on-demand"),
    ({}, None, "no nodes"),
])
def test_purchase_text(purchase, term, text):
    assert H.purchase_text(purchase, term) == text


def test_best_alternative_is_the_cheapest_rejected_only_for_cost():
    cluster = {"monthly_usd": 1000.0, "alternatives": [
        {"cloud": "aws", "region": "us-east-1", "instance_type": "g6.xlarge",
         "purchase": {"spot": 8}, "monthly_usd": 500.0, "rejected_because": "no RDMA"},
        {"cloud": "aws", "region": "us-west-2", "instance_type": "g6.48xlarge",
         "purchase": {"spot": 1}, "monthly_usd": 1300.0, "rejected_because": "cost (+$300.00/month)"},
        {"cloud": "gcp", "region": "us-central1", "instance_type": "g2-standard-96",
         "purchase": {"on_demand": 1}, "monthly_usd": 1100.0,
         "rejected_because": "cost (+$100.00/month)"},
        {"cloud": "aws", "region": "us-east-1", "instance_type": "p5e.48xlarge",
         "purchase": {}, "monthly_usd": None, "rejected_because": "no price"}]}
    best = H.best_alternative(cluster)
    assert (best["where"], best["instance_type"], best["delta"]) == \
        ("gcp us-central1", "g2-standard-96", "+$100.00")
    ruled_out = H.cheaper_ruled_out(cluster)
    assert ruled_out["instance_type"] == "g6.xlarge" and ruled_out["delta"] == "−$500.00"
    assert ruled_out["reason"] == "no RDMA"
    assert H.best_alternative({"monthly_usd": 1.0, "alternatives": []}) is None


# ---- the page -----------------------------------------------------------------------------
def test_page_is_self_contained_and_has_every_chart():
    page = render_html(PROD)
    p = parse(page)
    assert p.attrs_with_urls == []                     # nothing to fetch, not even xmlns
    assert "<script" not in page and "@import" not in page and "url(" not in page
    for chart in ("by-cluster", "by-purchase-model", "by-cloud", "by-storage-class", "budget"):
        assert f'id="{chart}"' in page, chart
    # by cluster: train 1500, infer 200, shared 46.5; the bars carry the exact values
    assert [v for v, _, _ in p.rects["by-cluster"]] == [1500.0, 200.0, 46.5]
    assert sorted(v for v, _, _ in p.rects["by-purchase-model"]) == [300.0, 900.0]
    assert '<span id="catalog-version">2026-01</span>' in page
    assert 'id="total">$1,746.50<' in page and 'id="headroom">$3,253.50<' in page
    assert "34.9 % of budget used" in element(page, "budget-share")


def test_prod_at_93_8_percent_of_budget_warns_and_is_not_green():
    plan = shipped_plan("prod")
    share = plan["totals"]["monthly_usd"] / plan["budget"]["monthly_usd"]
    assert 0.9 <= share < 1.0 and plan["violations"] == []    # the case issue 15 showed
    page = render_html(plan)
    assert 'class="card card-warn" id="headroom-card"' in page
    assert 'class="warn" id="headroom"' in page
    assert f"{100 * share:.1f} % of budget used" in element(page, "budget-share")
    verdict = element(page, "verdict")
    assert 'class="verdict verdict-warn"' in verdict
    # "0 violations" is not painted green while the budget warns
    assert 'class="neutral" id="violations">0 violations<' in page
    assert 'class="ok"' not in page
    assert 'data-status="warn"' in page and "90 %: warning" in page


def test_prod_clusters_show_zone_rationale_and_best_alternative():
    plan = shipped_plan("prod")
    page = render_html(plan)
    text = " ".join(parse(page).texts)
    for c in plan["clusters"]:
        assert c["zone"], c["name"]
        assert f"{c['cloud']} · {c['zone']}" in page, c["name"]
        assert H.money(c["monthly_usd"]) in page
        # the rationale, escaped as the page shows it
        assert str(escape(c["rationale"])) in page
    pretrain = next(c for c in plan["clusters"] if c["name"] == "pretrain")
    best = H.best_alternative(pretrain)
    # the policy's own "next best" in the rationale is the cheapest cost-only rejection
    assert f"next best {best['where'].replace(' ', ':')} {best['instance_type']} costs " \
           f"{best['delta']}/month" in pretrain["rationale"]
    assert f"Best alternative: {best['instance_type']} on {best['where']}" in text
    assert text.count("Best alternative:") == len(plan["clusters"])


def test_storage_never_shows_a_class_without_its_cloud():
    plan = shipped_plan("prod")
    assert {s["cloud"] for s in plan["storage"]} == {"aws", "gcp"}   # both clouds have STANDARD
    page = render_html(plan)
    p = parse(page)
    rows, by_class = H.storage_views(plan)
    assert {r["cloud"] for r in rows} == {"aws", "gcp"}
    assert "aws · STANDARD" in by_class and "gcp · STANDARD" in by_class
    assert by_class["aws · STANDARD"] != by_class["gcp · STANDARD"]
    labels = [lbl for lbl in p.texts if lbl.endswith("STANDARD")]
    assert labels and all(" · " in lbl for lbl in labels if lbl != "STANDARD")
    table = page[page.index('id="storage"'):]
    table = table[:table.index("</table>")]
    for r in rows:
        assert f"<td>{r['cloud']}</td><td>{r['region']}</td>" in table
    assert table.count("<tr><td>") == sum(len(s["tiers"]) for s in plan["storage"])
    assert sum(v for v, _, _ in p.rects["by-storage-class"]) == pytest.approx(
        sum(s["monthly_usd"] for s in plan["storage"]), abs=0.05)


def test_over_budget_and_violations_are_shown_and_escaped():
    plan = make_plan("prod", [(T_ASG, "<b>x</b>", "<i>train</i>", 9000.0)], budget=5000.0)
    plan["violations"] = [{"policy": "budget-cap", "level": "mandatory", "resource": "",
                           "message": "<script>alert(1)</script> exceeds the budget"}]
    page = render_html(plan)
    assert "Over budget by" in page and 'class="over" id="headroom">$4,000.00<' in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert "&lt;i&gt;train&lt;/i&gt;" in page and "<i>" not in page
    assert "<script" not in page and "&lt;script&gt;" in page
    assert 'class="viol-mandatory">mandatory' in page and "(stack)" in page
    assert "1 mandatory guardrail violation" in element(page, "verdict").replace("\n", " ") \
        or "1 mandatory guardrail violation" in page
    assert 'class="over" id="violations">1 violation<' in page


def test_program_warnings_are_listed_escaped():
    plan = dict(PROD, warnings=["gpulease:clusters[0].gpus: <rounded> up to 8"])
    page = render_html(plan)
    assert "<h2>Warnings (1)</h2>" in page
    assert "<li>gpulease:clusters[0].gpus: &lt;rounded&gt; up to 8</li>" in page
    assert "Warnings (" not in render_html(PROD)


def test_write_html_creates_missing_directories(tmp_path):
    out = write_html(PROD, tmp_path / "a" / "b" / "report.html")
    assert out.read_text(encoding="utf-8") == render_html(PROD)
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.html"]  # no temp left


def test_write_html_into_a_directory_or_under_a_file_is_bad_input(tmp_path):
    with pytest.raises(ConfigError, match=r"--html: .* is a directory: give a file name, "
                                          r"e\.g\. --html .*report\.html") as exc:
        write_html(PROD, tmp_path)
    assert exc.value.exit_code == EXIT_BAD_INPUT
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    for target in (blocker / "r.html", blocker / "sub" / "r.html"):
        with pytest.raises(ConfigError, match=r"--html: cannot write .*plain-file/.*r\.html: "
                                              r".*plain-file is a file, not a directory"):
            write_html(PROD, target)
    assert blocker.read_text() == "x"


def test_cli_html_into_a_missing_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "reports" / "dev" / "plan.html"
    assert main(["plan", "--stack", "dev", "--html", str(out)]) == EXIT_OK
    assert "sandbox" in out.read_text() and f"wrote {out}" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["plan", "--stack", "dev", "--html", str(blocker / "x.html")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"error: --html: cannot write {blocker / 'x.html'}: {blocker} is a file" in err
    assert "Traceback" not in err


# ---- headless Chromium ----------------------------------------------------------------------
def screenshot(page: str, tmp_path: Path, height: int) -> np.ndarray:
    """Render the page in headless Chromium; the screenshot as an (h, w, 3) uint8 array."""
    chromium = require_tool("chromium", "chromium-browser")
    src = tmp_path / "report.html"
    src.write_text(page, encoding="utf-8")
    png = tmp_path / "out.png"
    # flags: /work/.library/env/machines/python.md (no sandbox as root, no GPU, no network)
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         f"--window-size=1280,{height}", f"--screenshot={png}", src.as_uri()],
        capture_output=True, text=True, timeout=HANG_S)
    assert png.exists(), proc.stderr[-2000:]
    return decode_png(png.read_bytes())


def decode_png(data: bytes) -> np.ndarray:
    """8-bit RGB/RGBA PNG -> (h, w, 3) array; PNG row filters undone (RFC 2083 §6)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert data[24] == 8 and data[25] in (2, 6), "expects 8-bit RGB or RGBA"
    bpp = 4 if data[25] == 6 else 3
    idat, pos = bytearray(), 8
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(bytes(idat)), dtype=np.uint8)
    stride = width * bpp
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        f, line = rows[y, 0], rows[y, 1:]
        if f == 0:
            cur = line.copy()
        elif f == 1:     # Sub: running sum per channel
            cur = (np.cumsum(line.reshape(width, bpp).astype(np.uint32), axis=0) & 0xFF) \
                .astype(np.uint8).reshape(stride)
        elif f == 2:     # Up
            cur = line + prev
        else:            # Average / Paeth depend on the decoded left byte: byte by byte
            cur = bytearray(line.tobytes())
            p = prev.tobytes()
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b = p[i]
                if f == 3:
                    cur[i] = (cur[i] + ((a + b) >> 1)) & 0xFF
                else:
                    c = p[i - bpp] if i >= bpp else 0
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
            cur = np.frombuffer(bytes(cur), dtype=np.uint8)
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)[:, :, :3]


def colour_pixels(img: np.ndarray, hex_colour: str) -> int:
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)
    return int(np.all(img == rgb, axis=2).sum())


def test_decode_png_undoes_every_filter():
    # A 3x2 RGB image; its second row encoded with each PNG filter by hand (RFC 2083 §6).
    top = [10, 20, 30, 40, 50, 60, 70, 80, 90]
    row = [1, 2, 3, 200, 100, 50, 0, 0, 255]

    def left(i):
        return row[i - 3] if i >= 3 else 0

    def upleft(i):
        return top[i - 3] if i >= 3 else 0

    def paeth(a, b, c):
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        return a if pa <= pb and pa <= pc else b if pb <= pc else c

    predict = {0: lambda i: 0, 1: left, 2: lambda i: top[i],
               3: lambda i: (left(i) + top[i]) // 2,
               4: lambda i: paeth(left(i), top[i], upleft(i))}
    for filt, pred in predict.items():
        encoded = [(row[i] - pred(i)) & 0xFF for i in range(9)]
        png = _png(3, 2, bytes([0] + top + [filt] + encoded))
        assert decode_png(png).reshape(2, 9).tolist() == [top, row], filt


def _png(w: int, h: int, raw: bytes) -> bytes:
    import struct

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) \
        + chunk(b"IEND", b"")


def test_prod_report_renders_in_chromium_and_is_not_blank(tmp_path):
    img = screenshot(render_html(shipped_plan("prod")), tmp_path, height=1400)
    assert img.shape == (1400, 1280, 3)
    grey = img.mean(axis=2)
    non_white = float((grey < 245).mean())
    assert non_white > 0.05, f"page looks blank: {non_white:.1%} non-white pixels"
    assert float(grey.std()) > 20
    # every cluster bar of the by-cluster chart is drawn (its colour fills its rectangle)
    by_cluster = H.bar_chart("by-cluster", "", shipped_plan("prod")["totals"]["by_cluster"])
    for bar in by_cluster.bars[:3]:
        assert colour_pixels(img, bar.colour) >= 0.8 * bar.width * H.BAR_HEIGHT, bar.label
    # the budget bar is drawn in the warning colour
    budget = H.budget_bar(H.budget_state(shipped_plan("prod")["totals"]["monthly_usd"],
                                         shipped_plan("prod")["budget"]["monthly_usd"]))
    assert colour_pixels(img, H.STATUS_COLOUR["warn"]) >= 0.9 * budget.used_w * 24


def test_a_200_dollar_cluster_is_visible_beside_a_400k_one_in_chromium(tmp_path):
    plan = make_plan("prod", [(T_ASG, "big-asg", "pretrain", 400000.0),
                              (T_ASG, "small-asg", "sandbox", 200.0)], budget=1e6)
    plan["totals"]["by_purchase_model"] = {"reserved": 400200.0}   # one bar: palette[0]
    plan["totals"]["by_storage_tier"] = {}
    chart = H.bar_chart("by-cluster", "", plan["totals"]["by_cluster"])
    small = chart.bars[1]
    assert small.label == "sandbox" and small.colour == H.PALETTE[1]
    img = screenshot(render_html(plan), tmp_path, height=900)
    # palette[1] is drawn only by the $200 bar (the by-cloud chart has one bar: palette[0])
    seen = colour_pixels(img, small.colour)
    assert seen >= 0.8 * small.width * H.BAR_HEIGHT, f"$200 bar: {seen} px"
    assert small.width >= 15
