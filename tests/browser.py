"""Open report pages in a real headless Chromium (Debian's package) and check that they render offline."""
from __future__ import annotations

from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]


def check_pages(paths: list[Path], shots: Path) -> None:
    """Every chart has an SVG or canvas and an export menu; no two texts of a chart overlap (text_overlaps); no
    console errors or warnings (Vega-Lite warns about specs it has to patch up, e.g. conflicting legends), no
    dialogs and no network requests."""
    from playwright import sync_api

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for path in paths:
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                errors, requests, dialogs = [], [], []
                page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.on("request", lambda r: requests.append(r.url))
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                page.goto(path.as_uri(), wait_until="load")
                n = page.locator(".vega-chart").count()
                if n:
                    page.wait_for_function(
                        "() => [...document.querySelectorAll('.vega-chart')]"
                        ".every(el => el.querySelector('svg, canvas'))", timeout=30_000)
                    # vega-embed's actions menu (export PNG/SVG) is on
                    assert page.locator(".vega-chart details.vega-actions, .vega-chart .vega-actions").count() == n
                page.wait_for_timeout(300)
                page.screenshot(path=str(shots / f"{path.parent.name}-{path.stem}.png"), full_page=True)
                overlaps = text_overlaps(page)
                page.close()
                assert not overlaps, (path.name, overlaps)
                assert not errors, (path.name, errors)
                assert not dialogs, (path.name, dialogs)
                bad = [u for u in requests if not u.startswith(("file:", "data:", "about:"))]
                assert not bad, (path.name, bad)
        finally:
            browser.close()


# Text of a rendered chart: every visible <text> of its SVG with its box, and the chart's own id. Vega hides
# the axis labels its labelOverlap drops with opacity 0; those are not drawn, so they cannot overlap.
_TEXT_BOXES = """() => [...document.querySelectorAll('.vega-chart svg')].flatMap((svg, i) => {
  const id = svg.closest('figure') ? svg.closest('figure').id : String(i);
  return [...svg.querySelectorAll('text')].filter(t => {
    if (!t.textContent.trim()) return false;
    for (let e = t; e && e !== svg; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden' || parseFloat(s.opacity) === 0
          || e.getAttribute('opacity') === '0') return false;
    }
    return true;
  }).map(t => { const r = t.getBoundingClientRect();
                return {chart: id, text: t.textContent, x: r.left, y: r.top, w: r.width, h: r.height}; });
})"""


def text_overlaps(page, slack: float = 1.0) -> list[tuple[str, str, str]]:
    """(chart id, text, text) for every two visible texts of one chart whose boxes overlap by more than
    `slack` px both ways (a glyph box is a little taller than its ink, hence the slack)."""
    boxes = page.evaluate(_TEXT_BOXES)
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a["chart"] != b["chart"]:
                continue
            dx = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            dy = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if dx > slack and dy > slack:
                found.append((a["chart"], a["text"], b["text"]))
    return found
