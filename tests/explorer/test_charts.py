from __future__ import annotations

from explorer import charts
from explorer.views import diff_segments


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
