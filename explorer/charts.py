"""Geometry for the explorer's server-side SVG charts.

These functions only compute numbers (positions, sizes) and carry labels along as data; the
SVG itself is written by templates (`explorer/_bars.svg.html` and friends), so every label a
person typed is autoescaped like any other template output and never becomes markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


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
    ticks = [
        Bar(x=round(b.x + b.width / 2, 2), y=height - 6, width=0, height=0, label=b.label, value=0)
        for i, b in enumerate(bars)
        if i % step == 0
    ]
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


# Topic labels are drawn at 10px (`.topic-map text` in explorer.css). Their width is estimated
# generously, so a label near an edge is moved far enough in to be whole.
LABEL_FONT_PX = 10.0
LABEL_CHAR_WIDTH = 0.68 * LABEL_FONT_PX
LABEL_MAX_CHARS = 22
LABEL_MARGIN = 3.0


def _label_text(label: str) -> str:
    flat = " ".join(str(label or "").split())
    return flat if len(flat) <= LABEL_MAX_CHARS else flat[: LABEL_MAX_CHARS - 1] + "…"


def _inside(centre: float, half: float, size: float) -> float:
    """`centre` moved so that centre ± half stays within 0..size (margins kept)."""
    low, high = half + LABEL_MARGIN, size - half - LABEL_MARGIN
    return round(min(max(centre, low), max(low, high)), 1)


@dataclass(frozen=True)
class TopicMap:
    width: int
    height: int
    circles: list[Circle]


def topic_map(
    items: Sequence[tuple[str, int, str, float | None, float | None]],
    *,
    width: int = 760,
    height: int = 380,
    max_labels: int = 24,
) -> TopicMap:
    """Circles for (label, message_count, href, map_x, map_y), sized by count (area ~ count).

    Items with a 2-D layout (map_x/map_y from the topic centroids) are scaled into the box;
    items without one are placed on a golden-angle spiral so the map is never empty.
    """
    r_min, r_max = 5.0, 42.0
    pad = r_max + 4
    peak = max((c for _, c, _, _, _ in items), default=0) or 1
    xs = [x for *_, x, y in items if x is not None and y is not None]
    ys = [y for *_, x, y in items if x is not None and y is not None]
    have_layout = len(xs) == len(items) and len(items) > 1 and (max(xs) - min(xs) or max(ys) - min(ys))
    labelled = {i for i, _ in sorted(enumerate(items), key=lambda p: -p[1][1])[:max_labels]}
    circles = []
    if have_layout:
        min_x, min_y = min(xs), min(ys)
        span_x = (max(xs) - min_x) or 1.0
        span_y = (max(ys) - min_y) or 1.0
    for i, (label, count, href, mx, my) in enumerate(items):
        r = r_min + (r_max - r_min) * math.sqrt(max(count, 0) / peak)
        if have_layout:
            cx = pad + (width - 2 * pad) * ((mx - min_x) / span_x)
            cy = pad + (height - 2 * pad) * ((my - min_y) / span_y)
        else:
            angle = i * 2.399963  # golden angle
            dist = math.sqrt((i + 0.5) / max(1, len(items)))
            cx = width / 2 + math.cos(angle) * dist * (width / 2 - pad)
            cy = height / 2 + math.sin(angle) * dist * (height / 2 - pad)
        text = _label_text(label)
        circles.append(
            Circle(
                cx=round(cx, 1),
                cy=round(cy, 1),
                r=round(r, 1),
                label=label,
                value=int(count),
                href=href,
                label_visible=i in labelled,
                label_text=text,
                label_x=_inside(cx, len(text) * LABEL_CHAR_WIDTH / 2, width),
                label_y=_inside(cy, LABEL_FONT_PX / 2, height),
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
