"""The log viewer's reading of a session log: ranks, folded repeats, search, the traceback."""

from __future__ import annotations

from orchestrator.api.ui.log_view import view_log

WARNING = "/x/deepspeed/runtime.py:42: FutureWarning: `torch.cuda.amp` is deprecated"


def test_ranks_are_named_and_their_prefix_dropped() -> None:
    view = view_log("[rank0]: step 1/4 loss=1\n[rank1]: step 1/4 loss=2\nplain\n")
    assert [(line.rank, line.text) for line in view.lines] == [
        (0, "step 1/4 loss=1"),
        (1, "step 1/4 loss=2"),
        (None, "plain"),
    ]


def test_repeated_lines_fold_into_their_first_copy_with_a_count() -> None:
    lines = ["start"]
    for step in range(1800):
        lines += [f"[rank{step % 2}]: {WARNING}", "  warnings.warn(", f"step {step}"]
    view = view_log("\n".join(lines) + "\n")
    warning = next(line for line in view.lines if line.text == WARNING)
    assert warning.repeats == 1799
    assert view.total == 1 + 3 * 1800
    assert view.hidden_copies == 2 * 1799
    assert len(view.lines) == 1 + 2 + 1800  # every step line stays: none repeats
    assert [line.number for line in view.lines][:4] == [1, 2, 3, 4]


def test_search_keeps_only_matching_lines_case_insensitively() -> None:
    text = "step 1 loss=3\nresumed from step 30\nRESUMED twice\nstep 31\n"
    view = view_log(text, query="resumed")
    assert [line.text for line in view.lines] == ["resumed from step 30", "RESUMED twice"]
    assert [line.number for line in view.lines] == [2, 3]


def test_the_last_traceback_is_marked_and_shown_whole() -> None:
    frame = '  File "/t/trainer.py", line 9, in step'
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            frame,
            "ValueError: retried",
            "step 5",
            "Traceback (most recent call last):",
            frame,
            "RuntimeError: boom at step 9",
        ]
    )
    view = view_log(text)
    marked = [line for line in view.lines if line.traceback]
    assert [line.number for line in marked] == [5]
    # The failing traceback is not folded into the earlier one's copies.
    assert [line.text for line in view.lines[-3:]] == [
        "Traceback (most recent call last):",
        frame,
        "RuntimeError: boom at step 9",
    ]
    assert view.has_traceback


def test_a_window_cut_from_the_end_drops_its_partial_first_line() -> None:
    view = view_log("ial line\nwhole\n", truncated=True)
    assert [line.text for line in view.lines] == ["whole"]
    assert view.truncated
