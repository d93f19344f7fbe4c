from __future__ import annotations

import math

from explorer import charts
from explorer.views.diff import diff_segments


def test_bars_scale_to_the_tallest_and_keep_labels_as_data():
    chart = charts.bar_chart([("<b>a</b>", 1, "?p=1"), ("b", 4, "?p=2"), ("c", 0, "?p=3")], selected="b")
    heights = [b.height for b in chart.bars]
    assert heights[1] == max(heights) and heights[2] == 0
    assert chart.bars[0].label == "<b>a</b>" and chart.bars[1].selected


def test_an_empty_chart_is_flat():
    chart = charts.bar_chart([("a", 0, ""), ("b", 0, "")])
    assert chart.empty and all(b.height == 0 for b in chart.bars)


def test_sparkline_points_are_numbers_only():
    spark = charts.sparkline([0, 3, 1, 5])
    assert spark.total == 9 and spark.peak == 5
    assert set(spark.points) <= set("0123456789., ")


def test_topic_map_sizes_circles_by_count_and_places_missing_layouts():
    placed = charts.topic_map([("big", 100, "/a", 0.0, 0.0), ("small", 1, "/b", 1.0, 1.0)])
    radii = {c.label: c.r for c in placed.circles}
    assert radii["big"] > radii["small"]
    spiral = charts.topic_map([(f"t{i}", i, "/", None, None) for i in range(30)])
    assert all(0 <= c.cx <= spiral.width and 0 <= c.cy <= spiral.height for c in spiral.circles)


def test_stacked_bar_marks_the_budget():
    bar = charts.stacked_bar([("recent", 600), ("index", 600)], 1000)
    assert bar.total == 1200 and bar.over_budget and bar.budget_x is not None
    assert bar.segments[1].x == bar.segments[0].width


def test_diff_segments_mark_words():
    segs = diff_segments("use ALTER USER now", "use ALTER ROLE now")
    assert ("del", "USER") in segs and ("ins", "ROLE") in segs
    long_a = "line\n" * 20000
    assert diff_segments(long_a, long_a + "more\n")[-1] == ("ins", "more\n")


def _crowded_map():
    # Forty topics with long labels, most of them at nearly the same spot of the layout.
    items = [
        (f"Planning the garden party number {i} with friends", 40 - i, f"/t{i}", 0.5 + i * 0.001, 0.5)
        for i in range(30)
    ] + [(f"Kayak trip {i}", 5, f"/k{i}", i / 9, 1.0) for i in range(10)]
    return items, charts.topic_map(items)


def test_topic_map_labels_never_overlap_and_stay_inside_the_map():
    _, crowded = _crowded_map()
    shown = [c for c in crowded.circles if c.label_visible]
    assert len(shown) >= 10
    boxes = []
    for c in shown:
        w = charts.label_width(c.label_text)
        left = {"start": c.label_x, "end": c.label_x - w}.get(c.label_anchor, c.label_x - w / 2)
        box = (left, c.label_y - charts.LABEL_HEIGHT / 2, left + w, c.label_y + charts.LABEL_HEIGHT / 2)
        # In its circle or beside it.
        near_x, near_y = min(max(c.cx, box[0]), box[2]), min(max(c.cy, box[1]), box[3])
        assert math.hypot(c.cx - near_x, c.cy - near_y) <= c.r + charts.LABEL_NEAR + 0.2, c
        assert box[0] >= 0 and box[1] >= 0 and box[2] <= crowded.width and box[3] <= crowded.height
        boxes.append(box)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


def test_crowded_labels_are_shortened_after_a_whole_word_and_circles_are_set_apart():
    items, crowded = _crowded_map()
    shortened = [c for c in crowded.circles if c.label_visible and c.label_text != c.label]
    assert shortened
    for c in shortened:
        assert c.label_text.endswith("…")
        kept = c.label_text[:-1].split(" ")
        assert kept == c.label.split(" ")[: len(kept)], c.label_text  # whole words only
    circles = crowded.circles
    for i, a in enumerate(circles):
        for b in circles[i + 1 :]:
            assert math.hypot(a.cx - b.cx, a.cy - b.cy) >= a.r + b.r, (a.label, b.label)
    assert len(circles) == len(items)


def test_a_label_is_cut_only_where_a_word_ends():
    assert charts.label_texts("Garden roses") == ["Garden roses", "Garden…"]
    assert charts.label_texts("Planning the garden party with all our friends") == [
        "Planning the garden party…",
        "Planning the garden…",
        "Planning the…",
        "Planning…",
    ]
    assert charts.label_texts("Supercalifragilisticexpialidocious-ness")[0].endswith("…")


def test_the_axis_labels_at_the_chart_ends_are_held_inside_it():
    days = [(f"2025-09-{d:02d}", d, "/") for d in range(1, 31)]
    chart = charts.bar_chart(days, width=760)
    first, last = chart.ticks[0], chart.ticks[-1]
    assert (first.anchor, first.x) == ("start", chart.bars[0].x)  # "2025-09-01" starts at its bar, not cut
    assert all(t.anchor == "middle" for t in chart.ticks[1:-1])
    assert last.anchor in {"middle", "end"} and last.x <= chart.width
