"""Layout checks for the console in a real browser (used by tests/test_console_browser.py).

Streamlit scrolls inside its main section, so a plain full-page screenshot stops at the viewport; and it
truncates st.metric text with an ellipsis, which a screenshot hides well. These helpers measure instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Every metric (st.metric and the console's big numbers): each word of its label and value must sit on one
# line (no break inside a word), inside the metric's column, and no element may clip its text (ellipsis).
METRIC_PROBLEMS_JS = r"""
() => {
  const out = [];
  const boxes = document.querySelectorAll('[data-testid="stMetric"], [data-testid="spectowerBigNumber"]');
  for (const box of boxes) {
    const col = box.closest('[data-testid="stColumn"]') || box.parentElement;
    const limit = col.getBoundingClientRect();
    if (limit.width === 0) continue;  // not displayed (a collapsed expander)
    for (const el of box.querySelectorAll('*')) {
      const style = getComputedStyle(el);
      if (el.scrollWidth > el.clientWidth + 1 && style.overflowX !== 'visible') {
        out.push(`clipped: "${el.textContent.trim()}" (${el.scrollWidth} > ${el.clientWidth} px wide)`);
      }
      if (el.scrollHeight > el.clientHeight + 1 && style.overflowY !== 'visible') {
        out.push(`clipped: "${el.textContent.trim()}" (${el.scrollHeight} > ${el.clientHeight} px high)`);
      }
    }
    const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent;
      const re = /\S+/g;
      let m;
      while ((m = re.exec(text)) !== null) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const rects = [...range.getClientRects()].filter(r => r.width > 0);
        const tops = new Set(rects.map(r => Math.round(r.top)));
        if (tops.size > 1) out.push(`broken mid-word: "${m[0]}"`);
        for (const r of rects) {
          if (r.right > limit.right + 1 || r.left < limit.left - 1) {
            out.push(`outside its column: "${m[0]}" (${Math.round(r.left)}..${Math.round(r.right)} vs `
                     + `${Math.round(limit.left)}..${Math.round(limit.right)})`);
          }
        }
      }
    }
  }
  return out;
}
"""

# Every plotly annotation and text label must lie inside its chart's SVG (plotly does not clip them; the
# SVG's edge does, which reads "max_runn" for "max_running").
CHART_PROBLEMS_JS = r"""
() => {
  const out = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('.main-svg');
    if (!svg) continue;
    const frame = svg.getBoundingClientRect();
    if (frame.width === 0) continue;
    // tick labels must not run into each other, nor into the next panel's ("11:5011:46")
    {
      const rects = [...plot.querySelectorAll('.xtick text, .ytick text')]
        .filter(t => getComputedStyle(t).display !== 'none' && t.style.opacity !== '0')
        .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([, r]) => r.width > 0);
      for (let i = 0; i < rects.length; i++) {
        for (let j = i + 1; j < rects.length; j++) {
          const [ta, a] = rects[i], [tb, b] = rects[j];
          if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) {
            out.push(`overlapping tick labels: "${ta}" / "${tb}"`);
          }
        }
      }
    }
    const texts = plot.querySelectorAll('.annotation-text, .textpoint text, .legendtext, .gtitle');
    for (const t of texts) {
      const r = t.getBoundingClientRect();
      if (r.width === 0) continue;
      if (r.left < frame.left - 1 || r.right > frame.right + 1 || r.top < frame.top - 1
          || r.bottom > frame.bottom + 1) {
        out.push(`clipped chart text: "${t.textContent}"`);
      }
    }
  }
  return out;
}
"""

# Dataframes: a table wider than its frame must scroll inside it, never be cut by the page.
TABLE_PROBLEMS_JS = r"""
() => {
  const out = [];
  const main = document.querySelector('[data-testid="stMain"]') || document.body;
  const right = main.getBoundingClientRect().right;
  for (const t of document.querySelectorAll('[data-testid="stDataFrame"]')) {
    const r = t.getBoundingClientRect();
    if (r.width > 0 && r.right > right + 1) out.push(`table beyond the page: ${r.right} > ${right}`);
  }
  return out;
}
"""

# Every text in the main section (charts and tables have their own checks above) must lie inside its column
# (or the page's block when in none), and no element may cut text or hide it behind a scroll bar: a button
# label ending in "…", a suggested command running off the edge of its code block.
COLUMN_PROBLEMS_JS = r"""
() => {
  const out = new Set();
  const main = document.querySelector('[data-testid="stMainBlockContainer"]')
    || document.querySelector('[data-testid="stMain"]');
  if (!main) return [];
  const skip = '[data-testid="stDataFrame"], .js-plotly-plot, [data-testid="stTooltipContent"]';
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!node.textContent.trim() || !parent || parent.closest(skip)) continue;
    const col = parent.closest('[data-testid="stColumn"]') || main;
    const limit = col.getBoundingClientRect();
    if (limit.width === 0) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of [...range.getClientRects()].filter(r => r.width > 0)) {
      if (r.right > limit.right + 1 || r.left < limit.left - 1) {
        out.add(`beyond its column: "${node.textContent.trim().slice(0, 60)}" (${Math.round(r.left)}..`
                + `${Math.round(r.right)} vs ${Math.round(limit.left)}..${Math.round(limit.right)})`);
      }
    }
  }
  for (const el of main.querySelectorAll('*')) {
    if (el.closest(skip) || el.clientWidth < 4 || !el.textContent.trim()) continue;
    const style = getComputedStyle(el);
    if (el.scrollWidth > el.clientWidth + 1 && style.overflowX !== 'visible') {
      out.add(`cut: "${el.textContent.trim().slice(0, 60)}" (${el.scrollWidth} > ${el.clientWidth} px wide)`);
    }
  }
  return [...out];
}
"""

SCROLL_HEIGHT_JS = r"""
() => {
  let h = document.documentElement.scrollHeight;
  for (const el of document.querySelectorAll('[data-testid="stMain"], [data-testid="stAppViewContainer"]')) {
    h = Math.max(h, el.scrollHeight);
  }
  return h;
}
"""


# Two animation frames: the layout (and plotly's resize handlers) have run after a viewport change.
SETTLE_JS = (
    "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 300))))"
)


def layout_problems(page: Any) -> list[str]:
    """Truncated or mid-word-wrapped metrics, clipped chart text, tables cut by the page, text outside its
    column or cut by its element."""
    return [*page.evaluate(METRIC_PROBLEMS_JS), *page.evaluate(CHART_PROBLEMS_JS),
            *page.evaluate(TABLE_PROBLEMS_JS), *page.evaluate(COLUMN_PROBLEMS_JS)]  # fmt: skip


def full_page_screenshot(page: Any, path: Path) -> None:
    """The whole page: the viewport grows to the main section's scroll height for the shot, then returns."""
    size = page.viewport_size
    height = int(page.evaluate(SCROLL_HEIGHT_JS))
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], min(height, 12_000))})
    page.evaluate(SETTLE_JS)
    try:
        page.screenshot(path=str(path), full_page=True, timeout=120_000)
    finally:
        page.set_viewport_size(size)
