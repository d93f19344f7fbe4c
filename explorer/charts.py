"""Geometry for the explorer's server-side SVG charts.

These functions only compute numbers (positions, sizes) and carry labels along as data; the
SVG itself is written by templates (`explorer/_bars.svg.html` and friends), so every label a
person typed is autoescaped like any other template output and never becomes markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: int
    href: str = ""
    selected: bool = False
    anchor: str = "middle"  # an axis label's text-anchor: the map's ends hold theirs in view


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    bars: list[Bar]
    max_value: int
    baseline: float
    ticks: list[Bar] = field(default_factory=list)  # axis labels reuse Bar for their position

    @property
    def empty(self) -> bool:
        return self.max_value == 0


TICK_FONT_PX = 10.0  # `.bars text` in explorer.css


def bar_chart(
    buckets: Sequence[tuple[str, int, str]],
    *,
    width: int = 760,
    height: int = 170,
    selected: str | None = None,
    max_ticks: int = 8,
) -> BarChart:
    """Vertical bars, one per (label, value, href) bucket, scaled to the largest value."""
    top, bottom = 8.0, 22.0
    plot_h = height - top - bottom
    n = max(1, len(buckets))
    slot = width / n
    gap = min(2.0, slot * 0.2)
    peak = max((v for _, v, _ in buckets), default=0)
    bars = []
    for i, (label, value, href) in enumerate(buckets):
        h = 0.0 if peak == 0 else max(1.0 if value else 0.0, plot_h * value / peak)
        bars.append(
            Bar(
                x=round(i * slot + gap / 2, 2),
                y=round(top + plot_h - h, 2),
                width=round(max(1.0, slot - gap), 2),
                height=round(h, 2),
                label=label,
                value=int(value),
                href=href,
                selected=selected is not None and label == selected,
            )
        )
    step = max(1, math.ceil(n / max_ticks))
    # An axis label is centred under its bar, except near the chart's ends, where it starts at
    # its bar's left edge (or ends at its right edge) so no character is cut ("2025-09-29").
    room = 0.4 * TICK_FONT_PX * max((len(b.label) for b in bars), default=0)
    ticks = []
    for i, b in enumerate(bars):
        if i % step:
            continue
        centre, anchor = b.x + b.width / 2, "middle"
        if centre < room:
            centre, anchor = max(0.0, b.x), "start"
        elif centre > width - room:
            centre, anchor = min(float(width), b.x + b.width), "end"
        ticks.append(Bar(x=round(centre, 2), y=height - 6, width=0, height=0, label=b.label, value=0,
                         anchor=anchor))
    return BarChart(
        width=width,
        height=height,
        bars=bars,
        max_value=int(peak),
        baseline=top + plot_h,
        ticks=ticks,
    )


@dataclass(frozen=True)
class Sparkline:
    width: int
    height: int
    points: str
    area: str
    total: int
    peak: int


def sparkline(values: Sequence[int], *, width: int = 120, height: int = 26) -> Sparkline:
    """A polyline over `values` (oldest first); `points` holds numbers only."""
    values = list(values) or [0]
    peak = max(values)
    n = len(values)
    pad = 2.0
    usable_h = height - 2 * pad
    coords = []
    for i, v in enumerate(values):
        x = pad + (width - 2 * pad) * (i / (n - 1) if n > 1 else 0.5)
        y = pad + usable_h - (usable_h * v / peak if peak else 0)
        coords.append(f"{x:.1f},{y:.1f}")
    points = " ".join(coords)
    area = f"{pad:.1f},{height - pad:.1f} {points} {width - pad:.1f},{height - pad:.1f}"
    return Sparkline(
        width=width, height=height, points=points, area=area, total=int(sum(values)), peak=int(peak)
    )


@dataclass(frozen=True)
class Circle:
    cx: float
    cy: float
    r: float
    label: str
    value: int
    href: str
    label_visible: bool
    label_text: str = ""  # the label as drawn: one line, shortened
    label_x: float = 0.0  # where it is drawn (centred), moved in from the map's edges
    label_y: float = 0.0
    # Which end of the text sits at label_x: a label beside its circle is anchored at the side
    # facing it, so text drawn narrower than estimated stays against the circle.
    label_anchor: str = "middle"
    # A circle too small for its label and with no room beside it shows it on hover and focus.
    hover_x: float = 0.0
    hover_y: float = 0.0


# Topic labels are drawn at 11px in DejaVu Sans or Verdana (`.topic-map text` in explorer.css):
# wide fonts, so widths estimated from theirs (in em, below) are generous for any narrower
# fallback, and labels placed apart here stay apart on screen.
LABEL_FONT_PX = 11.0
LABEL_HEIGHT = 1.25 * LABEL_FONT_PX  # the text's box: ascent and descent, with a little air
LABEL_MAX_CHARS = 26
LABEL_MARGIN = 3.0  # kept between a label and the map's edge
LABEL_GAP = 2.0  # kept between two labels
LABEL_NEAR = 4.0  # a label beside its circle is at most this far from its edge
_EM = {
    **dict.fromkeys("ijlI|!.,:;'’ ", 0.33),
    **dict.fromkeys("frt-()[]/", 0.43),
    **dict.fromkeys("mwMW…—", 1.0),
    **dict.fromkeys("ABCDGHKNOQRUVXYZ&%@", 0.8),
}
_EM_LOWER = 0.64  # other lower-case letters, digits and most accented ones
_EM_UPPER = 0.72


def label_width(text: str) -> float:
    """The drawn width of `text` in the map's units, estimated on the wide side."""
    em = 0.0
    for ch in text:
        if ch in _EM:
            em += _EM[ch]
        elif ord(ch) > 0x2E7F:  # CJK and other full-width scripts
            em += 1.0
        else:
            em += _EM_UPPER if ch.isupper() else _EM_LOWER
    return em * LABEL_FONT_PX


def label_texts(label: str) -> list[str]:
    """`label` as it may be drawn, longest first: whole, then cut after fewer and fewer words
    (never mid-word, unless a single word is too long)."""
    flat = " ".join(str(label or "").split())
    words = flat.split(" ")
    out = [flat] if len(flat) <= LABEL_MAX_CHARS else []
    for n in range(len(words) - 1, 0, -1):
        cut = " ".join(words[:n]).rstrip(",;:-–") + "…"
        if len(cut) <= LABEL_MAX_CHARS:
            out.append(cut)
    if not out:
        out.append(flat[: LABEL_MAX_CHARS - 1] + "…")
    return out


def _inside(centre: float, half: float, size: float) -> float:
    """`centre` moved so that centre ± half stays within 0..size (margins kept)."""
    low, high = half + LABEL_MARGIN, size - half - LABEL_MARGIN
    return round(min(max(centre, low), max(low, high)), 1)


@dataclass(frozen=True)
class TopicMap:
    width: int
    height: int
    circles: list[Circle]


def _spread_apart(xy: np.ndarray, r: np.ndarray, width: int, height: int, rounds: int = 80) -> None:
    """Push overlapping circles apart (in place), kept inside the map: nearby topics stay near,
    none hides another. A bounded number of rounds (the page must stay quick): a crowded map
    may keep small overlaps, never a circle's centre under another circle."""
    x, y = xy[:, 0].copy(), xy[:, 1].copy()
    need = r[:, None] + r[None, :] + 2
    np.fill_diagonal(need, 0)
    for _ in range(rounds):
        dx, dy = x[:, None] - x[None, :], y[:, None] - y[None, :]
        dist = np.maximum(np.sqrt(dx * dx + dy * dy), 1e-6)
        push = np.clip(need - dist, 0, None) / (2 * dist)
        if not push.any():
            break
        x += (dx * push).sum(axis=1)
        y += (dy * push).sum(axis=1)
        np.clip(x, r + 1, np.maximum(r + 1, width - r - 1), out=x)
        np.clip(y, r + 1, np.maximum(r + 1, height - r - 1), out=y)
    xy[:, 0], xy[:, 1] = x, y


def _box(x: float, y: float, w: float) -> tuple[float, float, float, float]:
    return (x - w / 2, y - LABEL_HEIGHT / 2, x + w / 2, y + LABEL_HEIGHT / 2)


def _boxes_meet(a: tuple, b: tuple) -> bool:
    g = LABEL_GAP
    return a[0] < b[2] + g and b[0] < a[2] + g and a[1] < b[3] + g and b[1] < a[3] + g


def _covers(box: tuple, cx: float, cy: float, r: float) -> bool:
    nearest_x, nearest_y = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])
    return math.hypot(cx - nearest_x, cy - nearest_y) < r


def _near(box: tuple, cx: float, cy: float, r: float) -> bool:
    """The label's box lies in its circle or beside it (within LABEL_NEAR of its edge)."""
    nearest_x, nearest_y = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])
    return math.hypot(cx - nearest_x, cy - nearest_y) <= r + LABEL_NEAR


def fits_inside(text: str, r: float) -> bool:
    """`text` drawn at the centre of a circle of radius `r` stays within it."""
    return math.hypot(label_width(text) / 2, LABEL_HEIGHT / 2) <= r


def needs_label(label: str, r: float) -> bool:
    """A circle big enough to hold at least the first word of its label needs the label drawn;
    a smaller one may show it on hover only."""
    return fits_inside(label_texts(label)[-1], r)


def place_labels(
    circles: Sequence[tuple[float, float, float, str]], width: int, height: int
) -> list[tuple[str, float, float, str] | None]:
    """Where each circle's label (cx, cy, r, label) is drawn, as (text, x, y, text-anchor), or None when it
    has no room: the biggest circles first, each label in its circle or beside it, never over
    another circle, shortened word by word when whole it would touch a label already placed or
    leave its circle. No two labels overlap; each stays inside the map. A circle that can hold
    its label's first word always gets one (needs_label)."""
    placed: list[tuple] = []
    out: list[tuple[str, float, float, str] | None] = [None] * len(circles)
    for i in sorted(range(len(circles)), key=lambda k: -circles[k][2]):
        out[i] = _place_one(i, circles, placed, width, height)
    return out


def _place_one(i, circles, placed, width, height) -> tuple[str, float, float, str] | None:
    cx, cy, r, label = circles[i]
    texts = label_texts(label)
    for text in texts:
        w = label_width(text)
        spots = [
            (cx, cy, "middle"),
            (cx, cy - r - LABEL_HEIGHT / 2 - 1, "middle"),
            (cx, cy + r + LABEL_HEIGHT / 2 + 1, "middle"),
            (cx + r + 3 + w / 2, cy, "start"),
            (cx - r - 3 - w / 2, cy, "end"),
        ]
        for x, y, anchor in spots:
            x, y = _inside(x, w / 2, width), _inside(y, LABEL_HEIGHT / 2, height)
            box = _box(x, y, w)
            if not _near(box, cx, cy, r) or any(_boxes_meet(box, other) for other in placed):
                continue
            if any(_covers(box, ox, oy, orad) for j, (ox, oy, orad, _) in enumerate(circles) if j != i):
                continue
            placed.append(box)
            return text, {"start": box[0], "end": box[2]}.get(anchor, x), y, anchor
    # No free spot beside it: the longest form that fits inside the circle (no other label
    # enters a circle, so it is free), if any does.
    for text in texts:
        if fits_inside(text, r):
            x, y = _inside(cx, label_width(text) / 2, width), _inside(cy, LABEL_HEIGHT / 2, height)
            placed.append(_box(x, y, label_width(text)))
            return text, x, y, "middle"
    return None


def topic_map(
    items: Sequence[tuple[str, int, str, float | None, float | None]],
    *,
    width: int = 760,
    height: int = 380,
    max_labels: int = 60,
) -> TopicMap:
    """Circles for (label, message_count, href, map_x, map_y), sized by count (area ~ count),
    pushed apart where they would overlap, and labelled where their labels do not overlap
    (place_labels): the biggest `max_labels`, and every circle that can hold its label.

    Items with a 2-D layout (map_x/map_y from the topic centroids) are scaled into the box;
    items without one are placed on a golden-angle spiral so the map is never empty.
    """
    if not items:
        return TopicMap(width=width, height=height, circles=[])
    r_min, r_max = 5.0, 42.0
    pad = r_max + 4
    peak = max(c for _, c, _, _, _ in items) or 1
    xs = [x for *_, x, y in items if x is not None and y is not None]
    ys = [y for *_, x, y in items if x is not None and y is not None]
    have_layout = len(xs) == len(items) and len(items) > 1 and (max(xs) - min(xs) or max(ys) - min(ys))
    radii = np.array([r_min + (r_max - r_min) * math.sqrt(max(c, 0) / peak) for _, c, _, _, _ in items])
    # Circles may fill 30% of the map at most, or they could not all be set apart.
    radii *= min(1.0, math.sqrt(0.3 * width * height / float((math.pi * radii**2).sum())))
    if have_layout:
        min_x, min_y = min(xs), min(ys)
        span_x = (max(xs) - min_x) or 1.0
        span_y = (max(ys) - min_y) or 1.0
        xy = np.array([[(mx - min_x) / span_x, (my - min_y) / span_y] for *_, mx, my in items])
        xy = pad + xy * [width - 2 * pad, height - 2 * pad]
    else:
        n = len(items)
        xy = np.array(
            [[width / 2 + math.cos(i * 2.399963) * math.sqrt((i + 0.5) / n) * (width / 2 - pad),
              height / 2 + math.sin(i * 2.399963) * math.sqrt((i + 0.5) / n) * (height / 2 - pad)]
             for i in range(n)]
        )
    # Topics at the very same spot are parted along the golden angle, then pushed apart.
    xy += np.array([[math.cos(i * 2.399963), math.sin(i * 2.399963)] for i in range(len(items))]) * 0.01
    _spread_apart(xy, radii, width, height)
    labelled = set(sorted(range(len(items)), key=lambda k: -items[k][1])[:max_labels])
    labelled |= {i for i in range(len(items)) if needs_label(items[i][0], float(radii[i]))}
    spots = place_labels(
        [(float(xy[i, 0]), float(xy[i, 1]), float(radii[i]), items[i][0]) for i in sorted(labelled)],
        width,
        height,
    )
    where = dict(zip(sorted(labelled), spots, strict=True))
    circles = []
    for i, (label, count, href, _, _) in enumerate(items):
        spot = where.get(i)
        r = float(radii[i])
        hover_w = label_width(label)
        circles.append(
            Circle(
                cx=round(float(xy[i, 0]), 1),
                cy=round(float(xy[i, 1]), 1),
                r=round(float(radii[i]), 1),
                label=label,
                value=int(count),
                href=href,
                label_visible=spot is not None,
                label_text=spot[0] if spot else "",
                label_x=spot[1] if spot else 0.0,
                label_y=spot[2] if spot else 0.0,
                label_anchor=spot[3] if spot else "middle",
                hover_x=_inside(float(xy[i, 0]), hover_w / 2, width),
                hover_y=_inside(float(xy[i, 1]) - r - LABEL_HEIGHT / 2 - 1, LABEL_HEIGHT / 2, height),
            )
        )
    # Big circles first so small ones stay clickable on top.
    circles.sort(key=lambda c: -c.r)
    return TopicMap(width=width, height=height, circles=circles)


@dataclass(frozen=True)
class Segment:
    x: float
    width: float
    label: str
    value: int
    css: str


@dataclass(frozen=True)
class StackedBar:
    width: int
    height: int
    segments: list[Segment]
    total: int
    budget: int
    budget_x: float | None
    over_budget: bool


ZONE_CLASSES = ("z0", "z1", "z2", "z3", "z4", "z5", "z6", "z7")


def stacked_bar(
    zones: Sequence[tuple[str, int]], budget: int, *, width: int = 760, height: int = 28
) -> StackedBar:
    """Tokens per budget zone laid end to end; the budget marked where it falls."""
    values = [(str(label), max(0, int(v))) for label, v in zones]
    total = sum(v for _, v in values)
    scale_max = max(total, budget, 1)
    x = 0.0
    segments = []
    for i, (label, v) in enumerate(values):
        w = width * v / scale_max
        segments.append(
            Segment(
                x=round(x, 2),
                width=round(w, 2),
                label=label,
                value=v,
                css=ZONE_CLASSES[i % len(ZONE_CLASSES)],
            )
        )
        x += w
    budget_x = round(width * budget / scale_max, 2) if budget else None
    return StackedBar(
        width=width,
        height=height,
        segments=segments,
        total=total,
        budget=int(budget),
        budget_x=budget_x,
        over_budget=bool(budget) and total > budget,
    )
