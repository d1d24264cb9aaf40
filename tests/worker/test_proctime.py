import os
import time

from worker.proctime import IMPORT_TIME, process_start_time


def fake_proc(tmp_path, stat: str, uptime: str):
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text(stat)
    (tmp_path / "uptime").write_text(uptime)
    return tmp_path


def test_this_process_started_before_the_worker_was_imported():
    started = process_start_time()
    assert IMPORT_TIME - 3600 <= started <= IMPORT_TIME <= time.time()


def test_command_names_with_spaces_and_parentheses_parse(tmp_path):
    ticks = 1000 * os.sysconf("SC_CLK_TCK")  # field 22, starttime: 1000 s after boot
    fields = ["S", *["0"] * 18, str(ticks), *["0"] * 30]
    stat = "123 (py (worker) x) " + " ".join(fields)
    uptime = f"{1000 + (time.time() - IMPORT_TIME) + 5:.2f} 0.0"
    started = process_start_time(fake_proc(tmp_path, stat, uptime))
    assert abs(started - (IMPORT_TIME - 5)) < 0.1


def test_unreadable_proc_falls_back_to_import_time(tmp_path):
    assert process_start_time(tmp_path) == IMPORT_TIME
    assert process_start_time(fake_proc(tmp_path, "garbage", "1.0")) == IMPORT_TIME
