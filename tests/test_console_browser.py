"""The operator console in a real browser (issue 17): Debian's chromium, headless, driven by
selenium against ``effectgate serve``'s app under uvicorn on the paper venue.

Set ``EFFECTGATE_CONSOLE_SCREENSHOTS=DIR`` to save the pages as PNG (docs/console.md's pictures).
Under ``CI=true`` a missing chromium or chromedriver fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from agentkit import BIG, ORDER
from effectgate.integrations import EffectgateClient
from effectgate.testing import PaperService, paper_service

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
SHOTS = os.environ.get("EFFECTGATE_CONSOLE_SCREENSHOTS")

if not (CHROMIUM and DRIVER):
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI=true: chromium and chromium-driver must be installed (.ci/run)")
    pytest.skip("chromium or chromedriver not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def ps() -> Iterator[PaperService]:
    with paper_service() as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-extensions",
        "--no-first-run",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=DriverService(str(DRIVER)), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: WebDriver, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SHOTS) / f"console-{name}.png"))


def wait_text(driver: WebDriver, text: str) -> None:
    WebDriverWait(driver, 30).until(ec.text_to_be_present_in_element((By.TAG_NAME, "main"), text))


def log_in(driver: WebDriver, ps: PaperService, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{ps.url}/console")
    WebDriverWait(driver, 30).until(ec.presence_of_element_located((By.ID, "token")))
    field = driver.find_element(By.ID, "token")
    field.send_keys(token)
    driver.find_element(By.ID, "login").click()
    WebDriverWait(driver, 30).until(ec.presence_of_element_located((By.ID, "whoami")))


class TestLogin:
    def test_a_wrong_token_is_refused_and_an_operator_gets_the_dashboard(
        self, ps: PaperService, browser: WebDriver
    ) -> None:
        browser.delete_all_cookies()
        browser.get(f"{ps.url}/console")
        assert "/console/login" in browser.current_url
        shot(browser, "login")
        browser.find_element(By.ID, "token").send_keys("not-a-token")
        browser.find_element(By.ID, "login").click()
        wait_text(browser, "Token not accepted")
        log_in(browser, ps, ps.operator_token)
        wait_text(browser, "Operations by state")
        cookie = browser.get_cookie("eg_console")
        assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict"


class TestApproveInTheBrowser:
    def test_an_approver_approves_and_the_action_is_dispatched(
        self, ps: PaperService, browser: WebDriver
    ) -> None:
        client = EffectgateClient(ps.url, ps.harness_token)
        before = ps.venue.effect_count
        assert client.propose("submit_order", "web.approve", BIG).waiting
        # Another payload under the same id, refused: the approver sees it beside the intent.
        assert client.propose("submit_order", "web.approve", {**BIG, "quantity": "9"}).outcome == (
            "refused"
        )
        log_in(browser, ps, ps.approver_token)
        browser.get(f"{ps.url}/console/approvals")
        card = browser.find_element(By.CSS_SELECTOR, '[data-operation="web.approve"]')
        assert "needs approval" in card.text and "idempotency conflict" in card.text
        assert client.get("web.approve").fingerprint in card.text
        # An approver has no other page.
        nav = browser.find_element(By.TAG_NAME, "nav").text
        assert "Approvals" in nav and "Kill switches" not in nav
        card.find_element(By.NAME, "reason").send_keys("checked the desk limits")
        shot(browser, "approvals")
        card.find_element(By.CSS_SELECTOR, 'button[value="approve"]').click()
        wait_text(browser, "Approved web.approve: now acknowledged")
        assert ps.venue.effect_count == before + 1
        assert client.get("web.approve").outcome == "done"


class TestKillSwitchInTheBrowser:
    def test_a_kill_switch_holds_the_next_action(
        self, ps: PaperService, browser: WebDriver
    ) -> None:
        """Invariant 7 (a kill switch stops every new dispatch of its class at once)."""
        client = EffectgateClient(ps.url, ps.harness_token)
        log_in(browser, ps, ps.operator_token)
        browser.get(f"{ps.url}/console/controls")
        browser.find_element(By.ID, "kill-reason-cancel_order").send_keys("venue maintenance")
        browser.find_element(By.ID, "kill-cancel_order").click()
        wait_text(browser, "Kill switch on for cancel_order")
        row = browser.find_element(By.ID, "class-cancel_order").text
        assert "ON: venue maintenance" in row
        before = ps.venue.effect_count
        held = client.propose(
            "cancel_order", "web.held", {"instrument": "XYZ-PERP", "order_ref": "web.approve"}
        )
        assert held.outcome == "held" and ps.venue.effect_count == before
        browser.get(f"{ps.url}/console/controls")
        assert browser.find_element(By.ID, "held-cancel_order").text == "1"
        shot(browser, "controls")
        browser.get(f"{ps.url}/console/operations?operation_id=web.held")
        browser.find_element(By.LINK_TEXT, "web.held").click()
        wait_text(browser, "Audit trail")
        assert browser.find_element(By.ID, "op-state").text == "validated"
        assert "held" in browser.find_element(By.TAG_NAME, "main").text
        shot(browser, "operation")
        browser.get(f"{ps.url}/console/controls")
        browser.find_element(By.ID, "kill-reason-cancel_order").send_keys("maintenance over")
        browser.find_element(By.ID, "kill-cancel_order").click()
        wait_text(browser, "Kill switch off for cancel_order")


class TestDivergenceInTheBrowser:
    def test_an_effect_made_outside_the_boundary_shows_up(
        self, ps: PaperService, browser: WebDriver
    ) -> None:
        """Invariant 5 (the sweep enumerates venue records: an orphan is always visible)."""
        ps.venue.inject_record("default:made-by-hand")
        ps.service.reconcile_now()
        log_in(browser, ps, ps.operator_token)
        browser.get(f"{ps.url}/console/divergences")
        table = browser.find_element(By.ID, "divergences").text
        assert "orphan" in table and "default:made-by-hand" in table
        shot(browser, "divergences")
        browser.get(f"{ps.url}/console")
        wait_text(browser, "Divergences by kind")
        charts = browser.find_element(By.ID, "charts").text
        assert "orphan" in charts
        # Two orders were sent in this module's earlier tests, minutes ago at most.
        assert "Dispatch rate, last 5 minutes" in charts and "submit_order" in charts
        shot(browser, "dashboard")
        browser.get(f"{ps.url}/console/audit")
        browser.find_element(By.ID, "verify").click()
        wait_text(browser, "Intact")


class TestQuarantineInTheBrowser:
    def test_an_operator_takes_over_an_uncertain_row_and_resolves_it_applied(
        self, ps: PaperService, browser: WebDriver
    ) -> None:
        """Invariant 10 (a quarantined row leaves the queue only by an operator's resolution
        with evidence; one that may have been dispatched is never released to dispatch again)."""
        client = EffectgateClient(ps.url, ps.harness_token)
        ps.venue.fail_next(1, after_apply=True)  # the order is placed, the reply is lost
        before = ps.venue.effect_count
        assert client.propose("submit_order", "web.lost", ORDER).outcome == "uncertain"
        assert ps.venue.effect_count == before + 1
        log_in(browser, ps, ps.operator_token)
        browser.get(f"{ps.url}/console/operations/default/web.lost")
        browser.find_element(By.ID, "to-queue").click()
        WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.ID, "take-over")))
        browser.find_element(By.ID, "take-reason").send_keys("venue desk says it may be live")
        browser.find_element(By.ID, "take-over-submit").click()
        wait_text(browser, "Took web.lost into the quarantine queue")
        browser.get(f"{ps.url}/console/quarantine")
        listed = browser.find_element(By.CSS_SELECTOR, '#quarantined [data-operation="web.lost"]')
        assert "may have been" in listed.text and "venue desk says" in listed.text
        listed.find_element(By.LINK_TEXT, "web.lost").click()
        WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.ID, "resolve")))
        key = browser.find_element(By.ID, "q-ledger-key").text
        assert key == "default:web.lost"
        assert "submitted" in browser.find_element(By.ID, "q-state").text
        assert "quarantine" in browser.find_element(By.ID, "audit-ledger").text
        # Dispatched: the form does not even offer a release.
        released = browser.find_element(By.CSS_SELECTOR, '#outcome option[value="released"]')
        assert released.get_attribute("disabled") is not None
        (venue_id,) = ps.venue.find(key)
        Select(browser.find_element(By.ID, "outcome")).select_by_value("applied")
        Select(browser.find_element(By.ID, "evidence")).select_by_value("venue_record")
        browser.find_element(By.ID, "reference").send_keys(venue_id)
        browser.find_element(By.ID, "reason").send_keys("order found in the venue's blotter")
        browser.execute_script("window.scrollTo(0, 0)")
        shot(browser, "quarantine")
        browser.find_element(By.ID, "resolve-submit").click()
        wait_text(browser, "Resolved web.lost applied: now acknowledged")
        assert browser.find_element(By.ID, "settled").text.startswith("This row is acknowledged")
        done = client.get("web.lost")
        assert done.outcome == "done" and done.body.get("venue_id") == venue_id
        assert ps.venue.effect_count == before + 1  # settled by evidence, never sent again
        trail = ps.service.store.audit_entries(scope="default", operation_id="web.lost", limit=50)
        resolved = [e for e in trail if e.detail.get("resolution")]
        assert resolved and "paper-operator" in resolved[-1].detail_text
        browser.get(f"{ps.url}/console/quarantine")
        assert "web.lost" not in browser.find_element(By.ID, "quarantined").text
