"""What a person reading the console's flow graph would trip over, measured in the browser.

:func:`graph_problems` measures the rendered SVG (``getBBox``, ``getPointAtLength``: the
fonts the browser really drew) and lists, one line each:

* a text of a box (title, detail, counts) that leaves its box;
* an edge that runs through a box (its path sampled every 2 units; the ends sit on the
  borders of the boxes it joins) or through another edge's label;
* an edge label that overlaps a box, a box's badge, another label, or leaves the drawing.
"""

from __future__ import annotations

from playwright.sync_api import Locator

__all__ = ["graph_problems"]

_MEASURE = """
(svg) => {
  const problems = [];
  const shift = (g) => g.transform.baseVal.consolidate()?.matrix ?? {e: 0, f: 0};
  const moved = (r, m) => ({x: r.x + m.e, y: r.y + m.f, width: r.width, height: r.height});
  const boxes = [...svg.querySelectorAll("g.box")].map((g) => {
    const m = shift(g);
    const badge = g.querySelector("g.badge circle");
    return {key: g.dataset.box, g, rect: moved(g.querySelector("rect").getBBox(), m),
            badge: badge ? moved(badge.getBBox(), m) : null};
  });
  const meets = (a, b, pad = 0) => a.x < b.x + b.width - pad && b.x + pad < a.x + a.width
    && a.y < b.y + b.height - pad && b.y + pad < a.y + a.height;
  const holds = (r, p, pad) => p.x > r.x + pad && p.x < r.x + r.width - pad
    && p.y > r.y + pad && p.y < r.y + r.height - pad;
  for (const b of boxes) {
    const own = b.g.querySelector("rect").getBBox();
    for (const t of b.g.querySelectorAll("text.title, text.detail, text.counts")) {
      const r = t.getBBox();
      if (!t.textContent.trim()) continue;
      if (r.x < own.x || r.y < own.y || r.x + r.width > own.x + own.width
          || r.y + r.height > own.y + own.height) {
        problems.push(`box ${b.key}: "${t.textContent}" leaves its box`);
      }
    }
  }
  const view = svg.viewBox.baseVal;
  const edges = [...svg.querySelectorAll("g.edge")].map((g) => {
    const text = g.querySelector("text");
    return {g, name: `${g.dataset.edge} ${g.dataset.source}->${g.dataset.target}`,
            path: g.querySelector("path"), text, label: text ? text.getBBox() : null};
  });
  for (const e of edges) {
    const length = e.path.getTotalLength();
    const crossed = new Set();
    for (let at = 0; at <= length; at += 2) {
      const p = e.path.getPointAtLength(at);
      for (const b of boxes) if (holds(b.rect, p, 2)) crossed.add(`box ${b.key}`);
      for (const o of edges) {
        if (o !== e && o.label && holds(o.label, p, 1)) {
          crossed.add(`the label "${o.text.textContent}"`);
        }
      }
    }
    for (const what of crossed) problems.push(`${e.name} runs through ${what}`);
    if (!e.label) continue;
    const r = e.label, said = `label "${e.text.textContent}"`;
    if (r.x < view.x || r.y < view.y || r.x + r.width > view.x + view.width
        || r.y + r.height > view.y + view.height) problems.push(`${said} leaves the drawing`);
    for (const b of boxes) {
      if (meets(r, b.rect)) problems.push(`${said} overlaps box ${b.key}`);
      if (b.badge && meets(r, b.badge)) problems.push(`${said} overlaps the badge of box ${b.key}`);
    }
    for (const o of edges) {
      if (o !== e && o.label && meets(r, o.label, 1)) {
        problems.push(`${said} overlaps label "${o.text.textContent}"`);
      }
    }
  }
  return problems;
}
"""


def graph_problems(graph: Locator) -> list[str]:
    """The problems of the rendered flow graph ``graph`` (the ``svg.graph`` element); empty
    when every label is whole and in its place and no edge crosses a box or a label."""
    problems: list[str] = graph.evaluate(_MEASURE)
    return problems
