"""`python -m benchmarks.eta` stays runnable: a small run samples every job's ETA, the current
rule's against the baseline's, and reports both."""

from __future__ import annotations

from benchmarks.eta import play_job, report, run


def test_a_played_job_chains_sessions_under_the_deadline_rule() -> None:
    played = play_job(3)
    assert len(played.sessions) >= 3
    assert played.sessions[-1].end_step == played.total_steps
    for before, after in zip(played.sessions, played.sessions[1:], strict=False):
        assert after.start_step == before.end_step
        assert after.launched > before.ended
        assert before.ended - before.launched <= 600.0


def test_a_small_run_reports_both_rules() -> None:
    figures = run(jobs=2, every=60.0)
    for name in ("baseline", "current"):
        assert figures[name]["samples"] > 10
        assert 0 <= figures[name]["median_error"] <= figures[name]["p90_error"]
    assert figures["baseline"]["coverage"] is None  # the old rule showed no range
    assert 0 <= figures["current"]["coverage"] <= 1
    text = report(figures)
    assert "ETA over 2 simulated chained jobs" in text
    assert "goal (median error <= 10%" in text
