"""Metric charts: every logged scalar, labelled session starts, hover marks, a live point and a
second job to compare."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.api.ui.charts import MAX_MARKS, live_value, metric_chart, metric_keys
from orchestrator.wire import LiveProgress, MetricPoint, SegmentOut

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _points(segment: int, steps: range, **extra: float) -> list[MetricPoint]:
    return [
        MetricPoint(segment_index=segment, step=s, values={"loss": 10.0 / s, **extra})
        for s in steps
    ]


def _segment(index: int, start: int) -> SegmentOut:
    return SegmentOut(
        index=index,
        state="succeeded",
        outcome="stopped",
        start_step=start,
        end_step=start + 10,
        limit_seconds=60.0,
        timings=None,
        error=None,
        checkpoint=None,
        created_at=NOW,
        launched_at=NOW,
        ended_at=NOW,
    )


def test_every_logged_scalar_is_a_chart_and_loss_comes_first() -> None:
    metrics = [
        *_points(0, range(1, 5), grad_norm=1.0),
        MetricPoint(segment_index=0, step=4, values={"eval_loss": 2.5, "epoch": 0.5}),
    ]
    assert metric_keys(metrics) == ["loss", "epoch", "eval_loss", "grad_norm"]
    chart = metric_chart(metrics, [], 10, "eval_loss")
    assert chart is not None
    assert [mark.title for mark in chart.series[0].marks] == ["this job: step 4, eval_loss 2.5"]
    assert metric_chart(metrics, [], 10, "no-such-metric") is None


def test_session_starts_are_labelled_and_the_axes_have_five_ticks() -> None:
    metrics = _points(0, range(1, 11)) + _points(1, range(11, 21)) + _points(2, range(11, 15))
    segments = [_segment(0, 0), _segment(1, 10), _segment(2, 10)]  # 2 retried 1's start
    chart = metric_chart(metrics, segments, 20, width=200.0)
    assert chart is not None
    assert chart.boundaries == [(100.0, "session 1")]
    assert [tick.text for tick in chart.x_ticks] == ["0", "5", "10", "15", "20"]
    assert len(chart.y_ticks) == 5
    assert chart.y_ticks[0].text == "0.5"  # the lowest value, at the bottom
    assert "across 3 session(s)" in chart.summary


def test_hover_marks_are_bounded_and_the_live_value_is_drawn() -> None:
    metrics = _points(0, range(1, 2001))
    chart = metric_chart(metrics, [], 3000, live=(2500, 0.001))
    assert chart is not None
    assert len(chart.series[0].marks) <= MAX_MARKS
    assert chart.live is not None
    assert chart.live.title == "now: step 2500, loss 0.001"
    assert chart.live.y == chart.height  # the lowest value so far


def test_the_live_point_follows_whichever_metric_is_shown() -> None:
    live = LiveProgress(
        segment_index=1,
        step=7,
        loss=0.5,
        step_seconds=0.1,
        at=NOW,
        estimated=False,
        metrics={"loss": 0.5, "lr": 0.01},
    )
    assert live_value(live, "lr") == (7, 0.01)
    assert live_value(live, "eval_loss") is None
    assert metric_keys([], live) == ["loss", "lr"]  # selectable before the first commit
    chart = metric_chart(_points(0, range(1, 5), lr=0.02), [], 10, "lr", live=(7, 0.01))
    assert chart is not None
    assert chart.live is not None
    assert chart.live.title == "now: step 7, lr 0.01"
    # A heartbeat from before metrics were carried still gives the loss.
    assert live_value(live.model_copy(update={"metrics": None}), "loss") == (7, 0.5)
    assert live_value(None, "loss") is None


def test_a_second_job_is_drawn_alongside() -> None:
    chart = metric_chart(
        _points(0, range(1, 11)), [], 10, compare=("other (j2)", _points(0, range(1, 21)))
    )
    assert chart is not None
    assert [series.label for series in chart.series] == ["this job", "other (j2)"]
    assert chart.x_ticks[-1].text == "20"  # the axis fits the longer job
    assert "other (j2) ends at 0.5 at step 20" in chart.summary
