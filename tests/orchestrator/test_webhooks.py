"""The pure part of webhook notifications (orchestrator/webhooks.py): which URLs a spec takes,
where a POST may go, what is shown of a URL (a secret), which events notify, the message and
the retry schedule. Delivery itself is tests/orchestrator/test_notifier.py."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.webhooks import (
    MAX_ATTEMPTS,
    MAX_RETRY_SECONDS,
    MAX_URL_CHARS,
    MAX_WEBHOOKS,
    URL_RULE,
    NotifySpec,
    check_url,
    destination_allowed,
    literal_address,
    message,
    notifies,
    parse_networks,
    redact_spec,
    redact_url,
    retry_delay,
    webhooks_of,
)

SECRET_HOOK = "https://hooks.slack.com/services/T000/B000/s3cr3t-t0ken"


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/hook",
        SECRET_HOOK + "?a=1&b=%2F#frag",
        "https://[2001:db8::1]:8443/x",
        "http://127.0.0.1:65535/",
        "https://user:pw@example.com/a(b)*,;=~!$'",
    ],
)
def test_an_http_url_as_rfc_3986_writes_it_is_accepted(url: str) -> None:
    check_url(url)
    assert NotifySpec(webhooks=[url]).webhooks == [url]


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "example.com/hook",
        "http://",
        "https:///path-without-host",
        "http://example.com/a b",
        "http://example.com/\x07",
        "http://example.com/é",
        "http://example.com/%zz",
        "http://example.com/%4",
        "http://example.com:0/",
        "http://example.com:port/",
        "http://example.com:70000/",
    ],
)
def test_anything_else_is_refused_without_quoting_the_url(url: str) -> None:
    with pytest.raises(ValueError, match=r"^each webhook must be an http") as caught:
        check_url(url)
    assert str(caught.value) == URL_RULE
    with pytest.raises(ValidationError) as refused:
        NotifySpec(webhooks=["https://example.com/ok", url])
    error = refused.value.errors()[0]
    assert error["loc"] == ("webhooks",)
    assert url not in error["msg"]


def test_a_url_may_be_as_long_as_the_limit_and_no_longer() -> None:
    base = "https://example.com/"
    check_url(base + "a" * (MAX_URL_CHARS - len(base)))
    with pytest.raises(ValueError, match="at most 2000 characters"):
        check_url(base + "a" * (MAX_URL_CHARS - len(base) + 1))


def test_a_notify_block_holds_one_to_five_webhooks() -> None:
    hooks = [f"https://example.com/{n}" for n in range(MAX_WEBHOOKS)]
    assert NotifySpec(webhooks=hooks).webhooks == hooks
    for count in (0, MAX_WEBHOOKS + 1):
        with pytest.raises(ValidationError):
            NotifySpec(webhooks=[f"https://example.com/{n}" for n in range(count)])


def test_the_allowed_networks_setting_is_a_comma_list_of_networks() -> None:
    assert parse_networks(" 127.0.0.0/8, 10.1.2.3/8,,fd00::/8 ,") == (
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert parse_networks("") == ()


@pytest.mark.parametrize(
    ("address", "allowed", "expected"),
    [
        ("8.8.8.8", "", True),
        ("2606:4700:4700::1111", "", True),
        ("127.0.0.1", "", False),
        ("10.0.0.5", "", False),
        ("169.254.169.254", "", False),  # the cloud metadata service
        ("::1", "", False),
        ("::ffff:127.0.0.1", "", False),  # loopback dressed as IPv6
        ("127.0.0.1", "127.0.0.0/8", True),
        ("::ffff:127.0.0.1", "127.0.0.0/8", True),
        ("10.0.0.5", "127.0.0.0/8", False),
    ],
)
def test_a_post_goes_only_to_public_addresses_and_the_networks_the_operator_allowed(
    address: str, allowed: str, expected: bool
) -> None:
    assert destination_allowed(address, parse_networks(allowed)) is expected


def test_a_literal_address_in_a_url_is_found_and_a_name_is_not() -> None:
    assert literal_address("http://127.0.0.1:8080/x") == "127.0.0.1"
    assert literal_address("http://[::1]/x") == "::1"
    assert literal_address("https://example.com/x") is None
    assert literal_address("not a url") is None


def test_only_the_scheme_and_host_of_a_webhook_are_ever_shown() -> None:
    assert redact_url(SECRET_HOOK) == "https://hooks.slack.com/…"
    assert redact_url("no-host-at-all") == "(webhook)"


def test_a_spec_is_returned_with_its_webhooks_redacted_and_the_stored_one_untouched() -> None:
    spec: dict[str, Any] = {"name": "j", "notify": {"webhooks": [SECRET_HOOK, 7], "other": 1}}
    shown = redact_spec(spec)
    assert shown == {
        "name": "j",
        "notify": {"webhooks": ["https://hooks.slack.com/…", "(webhook)"], "other": 1},
    }
    assert "s3cr3t" not in repr(shown)
    assert spec["notify"]["webhooks"] == [SECRET_HOOK, 7]
    for plain in ({"name": "j"}, {"notify": None}, {"notify": {"webhooks": "x"}}):
        assert redact_spec(plain) == plain


def test_the_webhooks_of_a_stored_spec_are_its_url_strings() -> None:
    assert webhooks_of({"notify": {"webhooks": [SECRET_HOOK, None, "https://e.com/2"]}}) == [
        SECRET_HOOK,
        "https://e.com/2",
    ]
    assert webhooks_of({}) == []
    assert webhooks_of({"notify": "x"}) == []
    assert webhooks_of({"notify": {"webhooks": None}}) == []


@pytest.mark.parametrize(
    ("kind", "index", "from_state", "to_state", "expected"),
    [
        ("job_state", None, "running", "succeeded", True),
        ("job_state", None, "running", "failed", True),
        ("job_state", None, "paused", "cancelled", True),
        ("job_state", None, "queued", "waiting", True),
        ("job_state", None, "waiting", "waiting", False),  # no change: no second message
        ("job_state", None, "queued", "running", False),
        ("job_state", None, "running", "paused", False),
        ("segment_failed", 3, "running", "failed", True),
        ("stalled", 3, None, None, True),
        ("segment_state", 3, "running", "committed", False),
    ],
)
def test_a_job_s_end_a_quota_wait_a_failed_or_stalled_segment_notify_and_nothing_else(
    kind: str, index: int | None, from_state: str | None, to_state: str | None, expected: bool
) -> None:
    assert notifies(kind, index, from_state, to_state) is expected


def test_a_job_message_says_what_happened_for_slack_discord_and_machines() -> None:
    body = message("j1", "gpt", "job_state", None, "failed", "out of memory", "http://b/jobs/j1")
    text = "Baton job gpt (j1) failed: out of memory http://b/jobs/j1"
    assert body == {
        "text": text,
        "content": text,
        "job_id": "j1",
        "job_name": "gpt",
        "event": "job_state",
        "state": "failed",
        "segment_index": None,
        "detail": "out of memory",
    }
    waiting = message("j1", "gpt", "job_state", None, "waiting", None)
    assert waiting["text"] == "Baton job gpt (j1) is waiting for quota"
    segment = message("j1", "gpt", "segment_failed", 4, "failed", "exit 1")
    assert segment["text"] == "Baton job gpt (j1): segment 4 failed: exit 1"
    assert segment["segment_index"] == 4


def test_a_long_detail_is_cut_in_the_text_and_discord_s_content_stays_under_2000() -> None:
    detail = "x" * 5000
    body = message("j1", "gpt", "job_state", None, "failed", detail, "http://b/" + "p" * 3000)
    assert body["text"].startswith("Baton job gpt (j1) failed: " + "x" * 300 + " http://b/")
    assert "x" * 301 not in body["text"]
    assert len(body["content"]) == 2000
    assert body["content"] == body["text"][:2000]
    assert body["detail"] == detail


def test_retries_double_from_two_seconds_up_to_ten_minutes() -> None:
    # The notifier gives up after MAX_ATTEMPTS tries, so no later delay is ever asked for.
    delays = [retry_delay(attempts) for attempts in range(0, MAX_ATTEMPTS + 1)]
    assert delays[:10] == [2.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0]
    assert delays[10:] == [MAX_RETRY_SECONDS] * (MAX_ATTEMPTS - 9)
    assert all(isinstance(delay, float) for delay in delays)
