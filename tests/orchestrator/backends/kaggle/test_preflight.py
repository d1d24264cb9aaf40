"""`baton kaggle check` against the emulator: it passes, and on an emulator configured like each
divergence from what Baton assumed, it reports what it found and stores it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.kaggle.findings import AccountFindings
from orchestrator.backends.kaggle.preflight import Outcome, Preflight, PreflightTiming, Report
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, start_emulator
from tests.support.kaggle import account_on
from worker.kaggle_access.chaining import SECRET_LABEL

TIMING = PreflightTiming(poll_seconds=0.2, wait_seconds=60, timeout_probe_seconds=2)


def _check(emulator: Emulator, tmp_path: Path, *, attach: bool = True) -> tuple[Report, Preflight]:
    findings = AccountFindings(tmp_path / "accounts" / "alice.json")
    preflight = Preflight(account_on(emulator), findings, TIMING)
    if attach:
        emulator.set_secret("alice", SECRET_LABEL, "alice-key")
        emulator.attach_secret(preflight.probe.ref, SECRET_LABEL)
    return preflight.run(), preflight


def _outcomes(report: Report) -> dict[str, Outcome]:
    return {check.name: check.outcome for check in report.checks}


def _cleaned(emulator: Emulator, preflight: Preflight) -> bool:
    kernels = emulator.state.kernels.kernels
    return (
        preflight.probe.ref not in kernels
        and preflight.sleeper.ref not in kernels
        and emulator.dataset(f"alice/{preflight.dataset_slug}") is None
    )


def test_the_preflight_passes_and_records_what_it_measured(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR) as emulator:
        report, preflight = _check(emulator, tmp_path)
        assert report.passed, report.checks
        assert set(_outcomes(report).values()) == {Outcome.OK}, report.checks
        assert _cleaned(emulator, preflight)
        # CPU only: no GPU quota was spent.
        assert all(session.accelerator == "none" for session in emulator.sessions())
    stored = AccountFindings(tmp_path / "accounts" / "alice.json").load()
    assert stored.pinned_sources is True
    assert stored.mount_layout == "input/datasets/<owner>/<slug>"
    assert stored.secret_readable is True
    assert stored.timeout_honoured is True
    assert stored.large_script_accepted is True
    assert stored.boot_offset_seconds is not None
    assert stored.boot_offset_seconds >= 0.2  # the emulated container boots for 0.3 s
    assert stored.checked_at is not None


@pytest.mark.parametrize(
    ("divergence", "check", "finding"),
    [
        ({"pinned_sources": False}, "pinned source", {"pinned_sources": False}),
        ({"mount_layout": "flat"}, "mount layout", {"mount_layout": "input/<slug>"}),
        (
            {"mount_layout": "versioned"},
            "mount layout",
            {"mount_layout": "input/datasets/<owner>/<slug>/versions/2"},
        ),
    ],
)
def test_the_preflight_reports_each_divergence(
    tmp_path: Path, divergence: dict[str, Any], check: str, finding: dict[str, Any]
) -> None:
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR | divergence) as emulator:
        report, preflight = _check(emulator, tmp_path)
        assert report.passed, report.checks
        assert _cleaned(emulator, preflight)
    found = {c.name: c for c in report.checks}[check]
    expected = Outcome.WARN if check == "pinned source" else Outcome.OK
    assert found.outcome is expected, found
    stored = AccountFindings(tmp_path / "accounts" / "alice.json").load()
    for name, value in finding.items():
        assert getattr(stored, name) == value


def test_an_unattached_secret_is_reported_not_fatal(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR) as emulator:
        report, _ = _check(emulator, tmp_path, attach=False)
    assert report.passed
    assert _outcomes(report)["secret"] is Outcome.WARN
    assert AccountFindings(tmp_path / "accounts" / "alice.json").load().secret_readable is False


def test_wrong_credentials_fail_the_first_check_and_store_nothing(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "emulator", **FAST_EMULATOR) as emulator:
        findings = AccountFindings(tmp_path / "accounts" / "alice.json")
        report = Preflight(account_on(emulator, "alice", "wrong"), findings, TIMING).run()
    assert not report.passed
    assert report.checks[0].name == "authentication"
    assert report.checks[0].outcome is Outcome.FAIL
    assert not findings.path.exists()
