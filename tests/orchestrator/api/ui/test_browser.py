"""The status page in a real headless Chromium (Playwright), against a live server.

Sessions are cut by step count (the test trainer stops itself every N steps), not by time, so
the job crosses the same number of sessions on a machine twice as fast or twice as slow.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from orchestrator.config import Settings
from tests.factories import ADMIN_TOKEN, job_spec, live_server
from tests.support.marks import starts_processes

CHROMIUM = "/usr/bin/chromium"
AXE = Path(__file__).parents[3] / "support" / "vendor" / "axe.min.js"
ARTIFACTS = Path(
    os.environ.get("BATON_TEST_ARTIFACTS", Path(__file__).parents[4] / "test-artifacts")
)
WAIT_MS = 180_000  # an upper bound for slow machines, never a correctness window

pytestmark = pytest.mark.slow


@pytest.fixture
@starts_processes
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: apt-get install -y chromium (.ci/run does it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield launched
        finally:
            launched.close()


def _serious_violations(page: Page) -> list[dict[str, Any]]:
    # Evaluated through the browser's debugging protocol, not as a <script>: the page's
    # Content-Security-Policy (rightly) refuses inline scripts; axe is the test's, not the page's.
    page.evaluate(AXE.read_text())
    result: dict[str, Any] = page.evaluate("async () => await axe.run(document)")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:3]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def _progress(page: Page) -> int:
    return int(page.locator("#job-progress").get_attribute("value") or 0)


def test_sign_in_watch_three_sessions_live_pause_resume_finish(
    settings: Settings, browser: Browser, tmp_path: Path
) -> None:
    # Sessions of 30 steps; the second, third and fourth wait at a step gate until the page has
    # shown them, so the page's 2 s refreshes see each on any machine, however fast it starts.
    gates = {step: tmp_path / f"gate-{step}" for step in (45, 75, 105)}
    spec = job_spec(
        name="browser-job",
        total_steps=240,
        config={
            "step_sleep": 0.05,
            "stop_every_steps": 30,
            "log_every": 5,
            "step_gates": {str(step): str(gate) for step, gate in gates.items()},
        },
    )
    with live_server(settings) as url:
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.goto(f"{url}/ui")
        assert page.url.endswith("/ui/signin")
        assert _serious_violations(page) == []
        page.get_by_label("API token").fill(ADMIN_TOKEN)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{url}/ui")

        response = httpx.post(
            f"{url}/api/v1/jobs", json=spec, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        # The list updates itself: the job appears without a reload.
        page.get_by_role("link", name="browser-job").wait_for(timeout=WAIT_MS)
        assert _serious_violations(page) == []

        page.get_by_role("link", name="browser-job").click()
        page.wait_for_url(f"{url}/ui/jobs/{job_id}")
        page.evaluate("window.__notReloaded = true")
        seen = {_progress(page)}

        def watch_until(shown: Callable[[int], bool]) -> None:
            # Every value the page shows is recorded, the one that ends the wait included.
            while True:
                progress = _progress(page)
                seen.add(progress)
                assert page.evaluate("window.__notReloaded") is True
                if shown(progress):
                    return
                page.wait_for_timeout(200)  # polling the page; htmx refreshes it every 2 s

        def within_session_of(step: int) -> Callable[[int], bool]:
            return lambda progress: progress >= step - 15

        for step in (45, 75):
            watch_until(within_session_of(step))
            gates[step].touch()
        # Three sessions of 30 steps each have committed, seen through live updates alone.
        watch_until(lambda progress: progress >= 90 and page.locator("svg.timeline g").count() >= 4)
        assert len([value for value in seen if value > 0]) >= 3
        assert page.locator("svg.loss line.boundary").count() >= 2
        assert page.evaluate("window.__notReloaded") is True
        assert _serious_violations(page) == []

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "job-page.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("BATON_UPDATE_README_SCREENSHOT") == "1":
            shutil.copy(shot, Path(__file__).parents[4] / "docs" / "img" / "job-page.png")

        page.locator("#action-pause").click()
        page.get_by_role("button", name="Yes, pause it").click()
        page.wait_for_url(f"{url}/ui/jobs/{job_id}")
        gates[105].touch()  # the fourth session takes its step, reads the pause and commits
        page.locator("#job-status .state-paused").wait_for(timeout=WAIT_MS)

        page.locator("#action-resume").click()
        page.get_by_role("button", name="Yes, resume it").click()
        page.wait_for_url(f"{url}/ui/jobs/{job_id}")
        page.locator("#job-status .state-succeeded").wait_for(timeout=WAIT_MS)
        assert _progress(page) == 240
        assert page.get_by_role("link", name="manifest").first.is_visible()
        # Done: only the final checkpoint keeps its files; the table says which steps were pruned.
        table = page.locator("section[aria-labelledby='checkpoints-heading'] tbody")
        table.locator("tr.kept").first.wait_for(timeout=WAIT_MS)
        for _ in range(WAIT_MS // 200):
            if table.locator("tr.kept").count() == 1:
                break
            page.wait_for_timeout(200)
        assert table.locator("tr.kept").count() == 1
        assert table.locator("tr.kept td").first.inner_text() == "240"
        assert table.locator("tr.pruned").count() >= 3
        assert "files deleted by retention" in table.locator("tr.pruned").first.inner_text()
        assert _serious_violations(page) == []


def _sign_in(page: Page, url: str) -> None:
    page.goto(f"{url}/ui/signin")
    page.get_by_label("API token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/ui")


def _submit(url: str, spec: dict[str, Any]) -> str:
    response = httpx.post(
        f"{url}/api/v1/jobs", json=spec, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def test_the_log_viewer_follows_a_job_across_sessions_and_search_finds_a_line(
    settings: Settings, browser: Browser, tmp_path: Path
) -> None:
    # Sessions 0 and 1 each wait at a step until the page has shown them running: the viewer is
    # seen following live sessions however fast the machine trains.
    gates = {"10": str(tmp_path / "gate-10"), "40": str(tmp_path / "gate-40")}
    spec = job_spec(
        name="log-job",
        total_steps=90,
        config={"stop_every_steps": 30, "log_every": 5, "step_gates": gates},
        # Long enough that no deadline ends a session while it waits at its gate.
        session={"limit_seconds": 900, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with live_server(settings) as url:
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        _sign_in(page, url)
        job_id = _submit(url, spec)
        page.goto(f"{url}/ui/jobs/{job_id}")
        page.evaluate("window.__notReloaded = true")
        body = page.locator("#log-body")
        # The viewer moves to each new session by itself and shows its lines as they come.
        steps = ((0, "step 5/90", "10"), (1, "resumed from step 30", "40"), (2, "step 90/90", None))
        for index, line, gate in steps:
            body.get_by_text(f"Session {index} (", exact=False).wait_for(timeout=WAIT_MS)
            body.locator("li", has_text=line).first.wait_for(timeout=WAIT_MS)
            assert page.evaluate("window.__notReloaded") is True
            if gate is not None:
                Path(gates[gate]).touch()
        page.locator("#job-status .state-succeeded").wait_for(timeout=WAIT_MS)
        assert _serious_violations(page) == []
        # The summary: quota per phase over the 3 sessions, the last metrics, the digest.
        quota = page.locator("#quota-use").inner_text()
        assert " in 3 sessions: startup " in quota
        assert quota.endswith("% of session time trained")
        assert page.locator("#final-metrics").inner_text().startswith("step 90: loss ")
        assert len(page.locator("#job-summary code.digest").inner_text()) == 64

        page.get_by_label("Search the log").fill("resumed from step")
        page.get_by_role("button", name="Search").click()
        page.wait_for_url(f"{url}/ui/jobs/{job_id}?q=resumed+from+step#log")
        found = page.locator(".log-lines li").all_inner_texts()
        assert len(found) == 1, found
        assert "resumed from step 60" in found[0]
        assert "1 line(s) contain" in page.locator("#log-about").inner_text()

        page.get_by_role("link", name="Session 1", exact=True).click()
        page.get_by_label("Search the log").fill("RESUMED")
        page.get_by_role("button", name="Search").click()
        page.wait_for_url(f"{url}/ui/jobs/{job_id}?session=1&q=RESUMED#log")
        found = page.locator(".log-lines li").all_inner_texts()
        assert len(found) == 1, found
        assert "resumed from step 30" in found[0]
        assert _serious_violations(page) == []


def test_a_failed_jobs_reason_links_to_its_traceback(settings: Settings, browser: Browser) -> None:
    spec = job_spec(name="failing", config={"fail_at_step": 7}, retry={"max_failures": 0})
    with live_server(settings) as url:
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        _sign_in(page, url)
        job_id = _submit(url, spec)
        page.goto(f"{url}/ui/jobs/{job_id}")
        page.locator("#job-status .state-failed").wait_for(timeout=WAIT_MS)
        page.locator("#failure-log").click()
        page.wait_for_url(f"{url}/ui/jobs/{job_id}?session=0#traceback")
        traceback = page.locator("#traceback")
        assert traceback.inner_text().startswith("Traceback (most recent call last):")
        assert traceback.is_visible()
        assert page.evaluate("location.hash") == "#traceback"
        rest = page.locator("#traceback ~ li").all_inner_texts()
        assert any("RuntimeError" in line for line in rest), rest
        assert _serious_violations(page) == []


def _scrolls_sideways(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth"))


def test_no_page_scrolls_sideways_at_360_and_390_px_and_dark_mode_follows_the_system(
    settings: Settings, browser: Browser
) -> None:
    long_name = "a-job-with-a-rather-long-name-to-wrap"
    with live_server(settings) as url:
        done = _submit(
            url,
            job_spec(
                name=long_name,
                total_steps=60,
                config={"stop_every_steps": 30, "log_every": 5},
            ),
        )
        failed = _submit(
            url, job_spec(name="failing", config={"fail_at_step": 3}, retry={"max_failures": 0})
        )
        for width in (360, 390):
            page = browser.new_page(viewport={"width": width, "height": 800})
            _sign_in(page, url)
            for job_id, state in ((done, "succeeded"), (failed, "failed")):
                page.goto(f"{url}/ui/jobs/{job_id}")
                page.locator(f"#job-status .state-{state}").wait_for(timeout=WAIT_MS)
                page.reload()  # the finished page, with its log and charts
                assert not _scrolls_sideways(page), (width, job_id)
                assert _serious_violations(page) == []
            page.goto(f"{url}/ui")
            page.get_by_role("link", name=long_name).wait_for(timeout=WAIT_MS)
            assert not _scrolls_sideways(page), width
            assert _serious_violations(page) == []
            page.close()

        dark = browser.new_page(viewport={"width": 1200, "height": 1400}, color_scheme="dark")
        _sign_in(dark, url)
        dark.goto(f"{url}/ui/jobs/{failed}?session=0#traceback")
        background = dark.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(17, 24, 39)"
        assert _serious_violations(dark) == []  # contrast included
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "job-page-dark.png"
        dark.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        # Another job's series on the same chart, through the compare form.
        dark.goto(f"{url}/ui/jobs/{failed}")
        dark.get_by_label("Compare with job").fill(done)
        dark.get_by_role("button", name="Compare").click()
        dark.wait_for_url(f"{url}/ui/jobs/{failed}?metric=loss&compare={done}#metrics")
        assert dark.locator("svg.loss polyline.curve-compare").count() == 1
        legend = dark.get_by_role("list", name="Chart legend").inner_text()
        assert f"{long_name} ({done})" in legend
        marks = dark.locator("svg.loss circle.mark title").all_text_contents()
        assert marks[-1].startswith(f"{long_name} ({done}): step 60, loss ")
        assert _serious_violations(dark) == []
        light = browser.new_page(viewport={"width": 1200, "height": 800}, color_scheme="light")
        _sign_in(light, url)
        assert light.evaluate("getComputedStyle(document.body).backgroundColor") == (
            "rgb(255, 255, 255)"
        )
