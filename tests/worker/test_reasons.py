"""Reasons users read are one line without server paths."""

from __future__ import annotations

from worker.boundary.text import MAX_REASON_CHARS
from worker.reasons import one_line, reason_for, storable


def test_paths_keep_only_their_last_part() -> None:
    text = "No such file: '/home/ops/.local/share/baton/sessions/j1-0001/working/data.txt'"
    assert one_line(text) == "No such file: '…/data.txt'"
    assert one_line("see /srv/baton/worker/runtime.py, line 3") == "see …/runtime.py, line 3"


def test_what_is_not_a_path_stays() -> None:
    assert one_line("loss 1/2 of 3, ratio a/b") == "loss 1/2 of 3, ratio a/b"
    assert one_line("owner/slug/3 not found") == "owner/slug/3 not found"


def test_one_line_and_bounded() -> None:
    assert one_line("first\n  second\tthird") == "first second third"
    assert len(one_line("x" * 10_000)) == MAX_REASON_CHARS


def test_an_exception_reads_as_its_type_and_message() -> None:
    error = FileNotFoundError(2, "No such file or directory")
    error.filename = "/tmp/secret/place/data.bin"
    assert (
        reason_for(error) == "FileNotFoundError: [Errno 2] No such file or directory: '…/data.bin'"
    )
    assert reason_for(KeyError()) == "KeyError"


def test_nul_and_lone_surrogates_become_replacement_characters_both_databases_accept() -> None:
    text = "CUDA error\x00 at \ud800 step\udfff 3 😀"
    assert storable(text) == "CUDA error\ufffd at \ufffd step\ufffd 3 😀"
    assert one_line(text) == "CUDA error\ufffd at \ufffd step\ufffd 3 😀"
    storable(text).encode("utf-8")  # valid UTF-8 now
