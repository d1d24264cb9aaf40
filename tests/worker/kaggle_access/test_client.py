"""Every client failure becomes Transient, Rejected or Gone; credentials are the user's, always."""

from __future__ import annotations

import os
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest
import requests
from kagglesdk.kernels.types.kernels_api_service import ApiGetAcceleratorQuotaStatisticsRequest

from orchestrator.backends.base import BackendError, Gone, Rejected, Transient
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, FaultKind, start_emulator
from tests.support.kaggle import account_on
from worker.kaggle_access.client import (
    KaggleAccount,
    KaggleAuthError,
    KaggleNotFound,
    KaggleServerError,
    classify,
)
from worker.kaggle_access.kernels import JobKernel, KernelPush


def _quota(account: KaggleAccount) -> object:
    request = ApiGetAcceleratorQuotaStatisticsRequest()
    return account.call(
        "GetAcceleratorQuotaStatistics",
        lambda c: c.kernels.kernels_api_client.get_accelerator_quota_statistics(request),
    )


PUSH = KernelPush(None, 60, False, True, [], [], [], None)


def test_a_wrong_key_is_rejected_as_an_auth_error(emulator: Emulator) -> None:
    with pytest.raises(KaggleAuthError, match="401"):
        _quota(account_on(emulator, "alice", "not-the-key"))


def test_acting_on_another_users_kernel_is_rejected_not_retried(emulator: Emulator) -> None:
    bob_kernel = JobKernel(account_on(emulator), "ignored")
    bob_kernel.owner = "bob"  # alice's credentials, bob's kernel
    with pytest.raises(KaggleAuthError, match="403"):
        bob_kernel.push("print(1)\n", PUSH)


def test_kernels_output_refusal_raised_as_value_error_is_classified(tmp_path: Path) -> None:
    with start_emulator(tmp_path / "two", **FAST_EMULATOR, users={"alice": "a", "bob": "b"}) as two:
        JobKernel(account_on(two, "bob", "b"), "private").push("print(1)\n", PUSH)
        # KaggleApi.kernels_output turns the 403 into a ValueError; Baton sees a refusal.
        with pytest.raises(KaggleAuthError):
            account_on(two, "alice", "a").transfer(
                "kernels_output",
                lambda api: api.kernels_output("bob/private", str(tmp_path / "out"), quiet=True),
            )


def test_rate_limit_is_transient_with_kaggles_retry_after(
    emulator: Emulator, alice: KaggleAccount
) -> None:
    emulator.faults.retry_after_seconds = 7
    emulator.faults.fail_next("GetAcceleratorQuotaStatistics", FaultKind.RATE_LIMITED)
    with pytest.raises(Transient) as limited:
        _quota(alice)
    assert limited.value.retry_after == 7


def test_the_emulators_own_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    with start_emulator(tmp_path, **FAST_EMULATOR, rate_limit_per_minute=3) as emulator:
        account = account_on(emulator)
        for _ in range(3):
            _quota(account)
        with pytest.raises(Transient) as limited:
            _quota(account)
        assert limited.value.retry_after is not None
        assert 0 < limited.value.retry_after <= 60


def test_not_found_is_gone(emulator: Emulator, alice: KaggleAccount) -> None:
    with pytest.raises(Gone):
        JobKernel(alice, "never-pushed").status(None)
    assert issubclass(KaggleNotFound, Gone)


def test_an_unreachable_kaggle_is_transient() -> None:
    account = KaggleAccount("alice", "k", timeout_seconds=5, factory=_nowhere)
    with pytest.raises(Transient):
        _quota(account)


def _nowhere(username: str, key: str, **kwargs: object) -> object:
    from tests.kaggle_emulator.client import emulator_client

    return emulator_client("http://127.0.0.1:9", username, key)


@pytest.mark.parametrize("where", ["environment", "token file"])
def test_ambient_tokens_never_act_for_a_user(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    emulator.state.options.api_tokens["KGAT_host_token"] = "host-owner"
    if where == "environment":
        monkeypatch.setenv("KAGGLE_API_TOKEN", "KGAT_host_token")
    else:
        (tmp_path / "home" / ".kaggle").mkdir(parents=True)
        (tmp_path / "home" / ".kaggle" / "access_token").write_text("KGAT_host_token")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _quota(account_on(emulator, "alice", "alice-key"))
    JobKernel(account_on(emulator), "mine").push("print(1)\n", PUSH)
    assert emulator.callers == {"alice"}


def test_a_new_style_api_token_works_as_bearer(emulator: Emulator) -> None:
    emulator.state.options.api_tokens["KGAT_carols_token"] = "carol"
    carol = account_on(emulator, "carol", "KGAT_carols_token")
    pushed = JobKernel(carol, "carols-kernel").push("print(1)\n", PUSH)
    assert pushed.version == 1
    assert emulator.callers == {"carol"}


def test_two_users_each_act_on_their_own_account(tmp_path: Path) -> None:
    users = {"alice": "alice-key", "bob": "bob-key"}
    with start_emulator(tmp_path, **FAST_EMULATOR, users=users) as emulator:
        for user, key in users.items():
            JobKernel(account_on(emulator, user, key), "job").push("print(1)\n", PUSH)
        assert {c.user for c in emulator.calls("SaveKernel")} == {"alice", "bob"}
        assert set(emulator.push_counts) == {"alice/job", "bob/job"}


def test_a_forked_child_s_calls_are_answered(emulator: Emulator, alice: KaggleAccount) -> None:
    # A Celery prefork worker forks after its parent has made Kaggle calls: the parent's call
    # threads do not exist in the child, so its calls must not wait on them until they time out.
    _quota(alice)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports only through its exit status
        try:
            _quota(alice)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _rate_limited(headers: dict[str, str]) -> requests.HTTPError:
    """The 429 as kagglesdk raises it (`response.raise_for_status()`), with these headers."""
    response = requests.Response()
    response.status_code = 429
    response.headers.update(headers)
    return requests.HTTPError("429 Too Many Requests", response=response)


def _wait_asked(headers: dict[str, str]) -> float | None:
    limited = classify(_rate_limited(headers), "GetKernel")
    assert isinstance(limited, Transient)
    return limited.retry_after


def test_a_retry_after_given_as_an_http_date_is_waited_out_in_full() -> None:
    """RFC 9110 lets Retry-After be a date: the wait is counted from the response's own Date,
    so a clock that differs from Kaggle's never makes the retry come sooner than asked."""
    date = "Tue, 24 Nov 2026 06:00:00 GMT"
    assert _wait_asked({"Date": date, "Retry-After": "Tue, 24 Nov 2026 06:01:30 GMT"}) == 90
    # A date already passed asks for no wait; a date without the response's Date, or one that
    # cannot be read, gives no hint (the engine's own backoff applies).
    assert _wait_asked({"Date": date, "Retry-After": "Tue, 24 Nov 2026 05:59:00 GMT"}) == 0
    assert _wait_asked({"Retry-After": "Tue, 24 Nov 2026 06:01:30 GMT"}) is None
    assert _wait_asked({"Date": date, "Retry-After": "soon"}) is None


def _answered(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    return requests.HTTPError(f"{status}", response=response)


def test_a_403_waits_only_where_it_means_the_first_version_is_still_processing() -> None:
    """A new dataset version is refused with 403 while the first one processes (kagglehub PR
    #182): there the write is tried again later. Anywhere else a 403 is Kaggle's refusal, and
    the job fails with it instead of retrying for ever."""
    account = KaggleAccount("alice", "a")

    def refused(api: object) -> None:
        raise _answered(403)

    with pytest.raises(Transient) as busy:
        account.transfer("CreateDatasetVersion", refused, busy_403=True)
    assert not isinstance(busy.value, KaggleAuthError)
    with pytest.raises(KaggleAuthError):
        account.transfer("kernels_output", refused)
    assert isinstance(classify(_answered(403), "GetKernel"), KaggleAuthError)


def test_a_500_is_a_server_error() -> None:
    """Kaggle's 5xx, from 500 on: passing, and the kernel "shell" check looks for it."""
    for status in (500, 502, 503):
        assert isinstance(classify(_answered(status), "GetKernel"), KaggleServerError)


def test_a_call_that_never_answers_is_transient_and_a_transfer_gets_its_longer_bound() -> None:
    """No Kaggle call holds the engine up: one with no answer within the account's bound is a
    passing outage. Checkpoint uploads and downloads get the transfer bound instead (an hour)."""
    account = KaggleAccount("alice", "a", timeout_seconds=0.05)
    never = threading.Event()
    later = threading.Event()
    try:
        with pytest.raises(Transient, match="no answer in time"):
            account.call("GetKernel", lambda client: never.wait(60))
        # Longer than the account's bound, far inside the transfer's.
        assert account.transfer("upload", lambda api: later.wait(0.5) or "uploaded") == "uploaded"
        # A plain download from a signed URL gets the transfer bound too.
        assert account.fetch("download", lambda: later.wait(0.5) or "fetched") == "fetched"
    finally:
        never.set()


def _raised(exc: BaseException) -> Callable[..., NoReturn]:
    def fn(*_: object) -> NoReturn:
        raise exc

    return fn


@pytest.mark.parametrize(
    ("raised", "kind", "reason"),
    [
        (_answered(404), KaggleNotFound, "GetKernel: not found"),
        (_answered(401), KaggleAuthError, "GetKernel: Kaggle refused access (401)"),
        (_answered(403), KaggleAuthError, "GetKernel: Kaggle refused access (403)"),
        (_rate_limited({}), Transient, "GetKernel: rate limited by Kaggle"),
        (_answered(502), KaggleServerError, "GetKernel: HTTPError 502"),
        (_answered(408), Transient, "GetKernel: HTTPError 408"),
        (requests.ConnectionError("reset"), Transient, "GetKernel: ConnectionError"),
        (
            ValueError("Permission 'kernels.get' was denied"),
            KaggleAuthError,
            "GetKernel: Kaggle refused access",
        ),
        (
            RuntimeError("Permission denied by a proxy"),
            Rejected,
            "GetKernel: RuntimeError: Permission denied by a proxy",
        ),
        (ValueError("unexpected field"), Rejected, "GetKernel: ValueError: unexpected field"),
        (
            zipfile.BadZipFile("truncated"),
            Transient,
            "GetKernel: the download was not a complete archive",
        ),
    ],
)
def test_what_kaggle_answered_reaches_the_user_naming_the_call(
    raised: BaseException, kind: type[BackendError], reason: str
) -> None:
    """The error contract's reason, as a user reads it: a refusal fails the job with it
    (`kaggle refused: ...`), a passing outage backs the job off with it (`backend_busy`). Each
    names the call and what Kaggle answered, whichever way the call was made."""
    account = KaggleAccount("alice", "a")
    with pytest.raises(kind) as by_call:
        account.call("GetKernel", _raised(raised))
    assert str(by_call.value) == reason
    with pytest.raises(kind) as by_transfer:
        account.transfer("GetKernel", _raised(raised))
    assert str(by_transfer.value) == reason
    with pytest.raises(kind) as by_fetch:
        account.fetch("GetKernel", _raised(raised))
    assert str(by_fetch.value) == reason


def test_a_403_while_the_first_version_processes_says_so() -> None:
    account = KaggleAccount("alice", "a")
    with pytest.raises(Transient) as busy:
        account.transfer("CreateDatasetVersion", _raised(_answered(403)), busy_403=True)
    assert (
        str(busy.value) == "CreateDatasetVersion: the dataset's first version is still processing"
    )


def test_a_call_without_an_answer_says_which_call() -> None:
    account = KaggleAccount("alice", "a", timeout_seconds=0.05)
    never = threading.Event()
    try:
        with pytest.raises(Transient) as silent:
            account.call("GetAcceleratorQuotaStatistics", lambda client: never.wait(60))
        assert str(silent.value) == "GetAcceleratorQuotaStatistics: no answer in time"
    finally:
        never.set()


def test_a_dataset_read_names_its_call_and_a_missing_one_is_none(
    emulator: Emulator, alice: KaggleAccount
) -> None:
    assert alice.own_dataset("never-made") is None
    with pytest.raises(KaggleNotFound) as missing:
        alice.dataset("never-made", owner="bob")
    assert str(missing.value) == "GetDataset: not found"
    emulator.faults.fail_next("GetDataset", FaultKind.SERVER_ERROR)
    with pytest.raises(KaggleServerError) as failed:
        alice.own_dataset("never-made")
    assert str(failed.value) == "GetDataset: HTTPError 500"
