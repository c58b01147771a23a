"""The web console in a real browser (headless Chromium): sign in, watch a
queue fill while a producer runs, open a message, see hostile payloads
render as text, redrive a DLQ and watch it drain (and cancel one), purge
with the confirmation, have a form from another site refused, and be
refused what a token's grants do not allow. Screenshots of each step go to
FILA_SCREENSHOTS (docs/console.md shows them).

The tests run in file order and share one server and one browser."""

import http.server
import json
import threading
import time

from selenium.common.exceptions import (
    NoAlertPresentException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait

from conftest import ADMIN, READER

WAIT_SECS = 30


def wait(browser, cond, what, secs=WAIT_SECS):
    # The console's live refresh replaces parts of a page every two
    # seconds: an element found just before may be gone, and is found
    # again at the next poll.
    return WebDriverWait(
        browser, secs, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
    ).until(lambda d: cond(d), message=f"waited {secs} s for {what}")


def text_of(browser, by, selector):
    """An element's text, found again if the live refresh replaced it."""
    for _ in range(10):
        try:
            return browser.find_element(by, selector).text
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector} kept changing")


def figure(browser, label):
    """A figure of the queue page's table, by its label (found again if
    the live refresh replaced it meanwhile)."""
    for _ in range(10):
        try:
            return browser.find_element(
                By.XPATH, f"//section[@id='figures']//tr[th='{label}']/td"
            ).text
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the figure {label} kept changing")


def gone(old):
    """Whether element `old` left the document: stale, or — Chrome's other
    way of saying so, while the next page replaces the old one — a node
    that "does not belong to the document"."""

    def check(browser):
        try:
            return staleness_of(old)(browser)
        except WebDriverException as e:
            if "does not belong to the document" in str(e):
                return True
            raise

    return check


def navigating(browser, act):
    """Runs `act` (a click or a submit that loads a page) and waits until
    the new page has loaded."""
    old = browser.find_element(By.TAG_NAME, "html")
    act()
    wait(browser, gone(old), "the next page")
    wait(browser, lambda d: d.execute_script("return document.readyState") == "complete",
         "the page to load")


def flash(browser):
    found = browser.find_elements(By.CSS_SELECTOR, "p.flash")
    return found[0].text if found else ""


def sign_in(browser, server, token):
    browser.get(server.url + "/signin")
    field = browser.find_element(By.NAME, "token")
    field.send_keys(token)
    navigating(browser, field.submit)


def put(server, queue, *payloads, attrs=()):
    args = ["--json", "put", queue, *payloads]
    for a in attrs:
        args += ["--attr", a]
    return [e["seq"] for e in json.loads(server.fila(*args))]


def no_script_ran(browser):
    assert browser.execute_script("return window.__pwned === undefined"), "a script ran"
    try:
        browser.switch_to.alert
    except NoAlertPresentException:
        return
    raise AssertionError("an alert opened")


def test_sign_in_with_a_token(server, browser, shot):
    browser.get(server.url + "/")
    assert browser.current_url.endswith("/signin")
    shot(browser, "signin")
    sign_in(browser, server, "not-a-token")
    assert "not one of the server" in flash(browser)
    sign_in(browser, server, ADMIN)
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Queues", "the overview")
    assert "signed in as admin" in browser.find_element(By.CLASS_NAME, "who").text


def test_a_queue_fills_while_a_producer_runs(server, browser, shot):
    server.fila("queue", "create", "orders")
    put(server, "orders", "first")
    browser.get(server.url + "/queues/orders")
    start = int(figure(browser, "Visible"))
    # The page is not reloaded by the test: a marker set now survives only
    # if the figures change in place (the console's live refresh).
    browser.execute_script("window.__marker = 'same page'")
    stop = threading.Event()

    def produce():
        for i in range(200):
            if stop.is_set():
                return
            put(server, "orders", *[f"order {i}-{k}" for k in range(5)])
            time.sleep(0.05)  # the producer's pace, not a synchronization

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait(browser, lambda d: int(figure(d, "Visible")) >= start + 50, "the queue to fill")
        assert browser.execute_script("return window.__marker") == "same page"
        # A few seconds of the chart (for the screenshot docs/console.md shows).
        wait(
            browser,
            lambda d: len(d.find_element(By.CSS_SELECTOR, "#figures polyline.s1")
                          .get_attribute("points").split()) >= 6,
            "six seconds of the depth chart",
        )
        shot(browser, "queue")
        browser.get(server.url + "/")
        wait(
            browser,
            lambda d: d.find_element(By.XPATH, "//table[@class='queues']//tr[td/a='orders']/td[8]").text
            not in ("—", "0.0"),
            "a put rate on the overview",
        )
        shot(browser, "overview")
    finally:
        stop.set()
        producer.join(60)


def test_a_message_opens_with_its_json_pretty_printed(server, browser, shot):
    [seq] = put(server, "orders", '{"order":42,"items":["tea","milk"],"rush":true}',
                attrs=["customer=alice", "source=web"])
    browser.get(f"{server.url}/queues/orders/messages/{seq}")
    payload = browser.find_element(By.CSS_SELECTOR, "pre.payload").text
    assert payload.startswith('{\n  "items": [\n    "tea"'), payload
    attrs = browser.find_element(By.CSS_SELECTOR, "table.attrs").text
    assert "customer alice" in attrs and "source web" in attrs
    shot(browser, "message")
    navigating(browser, browser.find_element(By.LINK_TEXT, "Hex").click)
    assert "7b 22 6f 72 64 65 72 22" in browser.find_element(By.CSS_SELECTOR, "pre.payload").text


def test_hostile_payloads_render_as_text_and_run_nothing(server, browser, shot):
    hostile = [
        "<script>window.__pwned=1;alert(1)</script>",
        '"><img src=x onerror="window.__pwned=1;alert(1)">',
        "<svg onload=\"window.__pwned=1\"><a href=\"javascript:alert(1)\">x</a>",
    ]
    seqs = put(server, "orders", *hostile, attrs=['"><img src=x onerror=alert(1)>=<b>bold</b>'])
    for seq, text in zip(seqs, hostile):
        browser.get(f"{server.url}/queues/orders/messages/{seq}")
        assert browser.find_element(By.CSS_SELECTOR, "pre.payload").text == text
        assert not browser.find_elements(By.CSS_SELECTOR, "main img, main svg script, main b")
        no_script_ran(browser)
    shot(browser, "hostile")
    browser.get(f"{server.url}/queues/orders/messages?from={seqs[0]}")
    cells = wait(
        browser,
        lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, "td.payload")],
        "the list's payloads",
    )
    assert cells[:3] == hostile, cells
    no_script_ran(browser)


def test_redrive_a_dlq_cancel_it_and_watch_one_drain(server, browser, shot):
    server.fila("queue", "create", "jobs")
    seqs = put(server, "jobs", *[f"job {i}" for i in range(60)])
    for seq in seqs[1:]:
        server.fila("dead-letter-seq", "jobs", str(seq), "--reason", "poison")
    # One more from the console's own form.
    browser.get(f"{server.url}/queues/jobs/messages/{seqs[0]}")
    reason = browser.find_element(By.NAME, "reason")
    reason.clear()
    reason.send_keys("stuck since Tuesday")
    navigating(browser, browser.find_element(By.XPATH, "//button[text()='Dead-letter']").click)
    assert f"Message {seqs[0]} dead-lettered." in flash(browser)
    browser.get(f"{server.url}/queues/jobs/messages?dlq=1")
    assert "consumer: stuck since Tuesday" in browser.page_source
    browser.get(f"{server.url}/queues/jobs")
    assert figure(browser, "In the DLQ") == "60"
    # A slow redrive, cancelled.
    rate = browser.find_element(By.NAME, "rate")
    rate.clear()
    rate.send_keys("1")
    navigating(browser, rate.submit)
    assert "Redrive started" in flash(browser)
    navigating(
        browser,
        browser.find_element(By.XPATH, "//section[@id='moves']//button[text()='Cancel']").click,
    )
    assert "cancelled" in flash(browser)
    assert "cancelled" in text_of(browser, By.CSS_SELECTOR, "#moves table")
    left = int(figure(browser, "In the DLQ"))
    assert 0 < left < 60, left
    # A faster one, watched until the DLQ is empty.
    rate = browser.find_element(By.NAME, "rate")
    rate.clear()
    rate.send_keys("15")
    navigating(browser, rate.submit)
    assert "Redrive started" in flash(browser)
    wait(browser, lambda d: "running" in d.find_element(By.CSS_SELECTOR, "#moves table").text
         or figure(d, "In the DLQ") == "0", "the redrive's progress")
    browser.execute_script("document.getElementById('moves').scrollIntoView()")
    shot(browser, "redrive")
    wait(browser, lambda d: figure(d, "In the DLQ") == "0", "the DLQ to drain")
    wait(browser, lambda d: "completed" in d.find_element(By.CSS_SELECTOR, "#moves table").text,
         "the task to complete")
    assert int(figure(browser, "Visible")) == 60


def test_a_filtered_redrive_is_previewed_by_its_button_then_started(server, browser, shot):
    server.fila("queue", "create", "picky")
    seqs = put(server, "picky", "a", "b", "c")
    for seq, reason in zip(seqs, ["timeout", "bad_input", "timeout"]):
        server.fila("dead-letter-seq", "picky", str(seq), "--reason", reason)
    browser.get(f"{server.url}/queues/picky")
    reason = browser.find_element(By.NAME, "reason")
    reason.send_keys("timeout")
    navigating(browser, browser.find_element(By.XPATH, "//button[text()='Preview']").click)
    count = text_of(browser, By.CSS_SELECTOR, "p.preview-count")
    assert count.startswith("2 dead letters would go back (only: reason timeout)"), count
    assert "Nothing has moved" in count
    rows = browser.find_elements(By.CSS_SELECTOR, "table.messages tbody tr")
    assert len(rows) == 2, browser.page_source
    shot(browser, "redrive-preview")
    navigating(browser, browser.find_element(By.XPATH, "//button[text()='Redrive these']").click)
    assert "Redrive started (only: reason timeout): 2 moved now" in flash(browser)
    assert figure(browser, "In the DLQ") == "1"
    assert "(only: reason timeout)" in text_of(browser, By.CSS_SELECTOR, "#moves table")


def test_settings_are_edited_with_the_manage_grant(server, browser):
    browser.get(f"{server.url}/queues/jobs")
    field = browser.find_element(By.NAME, "max_deliveries")
    field.clear()
    field.send_keys("7")
    navigating(browser, browser.find_element(By.XPATH, "//button[text()='Save settings']").click)
    assert "Saved: max_deliveries." in flash(browser)
    assert browser.find_element(By.NAME, "max_deliveries").get_attribute("value") == "7"
    assert json.loads(server.fila("--json", "queue", "get", "jobs"))["max_deliveries"] == 7


class _Attacker(http.server.BaseHTTPRequestHandler):
    """A page of another site whose form posts to the console."""

    target = ""

    def do_GET(self):
        body = (
            "<!doctype html><form id=f method=post action='" + self.target + "'>"
            "<input name=confirm value=jobs><input name=csrf value=guess></form>"
            "<script>document.getElementById('f').submit()</script>"
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_form_from_another_site_is_refused(server, browser):
    _Attacker.target = f"{server.url}/queues/jobs/purge"
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    evil.daemon_threads = True
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        wait(browser, lambda d: "Refused" in d.page_source, "the console's refusal")
    finally:
        evil.shutdown()
        evil.server_close()
    browser.get(f"{server.url}/queues/jobs")
    assert figure(browser, "Visible") == "60", "nothing purged"


def test_purge_asks_for_the_queue_name(server, browser, shot):
    browser.get(f"{server.url}/queues/jobs")
    navigating(browser, browser.find_element(By.LINK_TEXT, "Purge the queue…").click)
    assert "Type the queue's name to confirm" in browser.page_source
    field = browser.find_element(By.NAME, "confirm")
    field.send_keys("job")
    shot(browser, "purge")
    navigating(browser, field.submit)
    assert "Not purged" in flash(browser)
    browser.get(f"{server.url}/queues/jobs")
    assert figure(browser, "Visible") == "60"
    navigating(browser, browser.find_element(By.LINK_TEXT, "Purge the queue…").click)
    field = browser.find_element(By.NAME, "confirm")
    field.send_keys("jobs")
    navigating(browser, field.submit)
    assert "The queue was purged." in flash(browser)
    assert figure(browser, "Visible") == "0"


def test_a_token_is_refused_what_its_grants_do_not_allow(server, browser, shot):
    navigating(browser, browser.find_element(By.XPATH, "//header//button[text()='Sign out']").click)
    assert browser.current_url.endswith("/signin")
    sign_in(browser, server, READER)
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Queues", "the overview")
    overview = text_of(browser, By.ID, "queues")
    assert "orders" in overview and "jobs" not in overview, overview
    assert "may not manage" in overview
    # It may browse orders' messages (its receive grant)...
    browser.get(f"{server.url}/queues/orders/messages")
    assert browser.find_elements(By.CSS_SELECTOR, "td.payload")
    assert not browser.find_elements(By.XPATH, "//button[text()='Delete']")
    # ...not purge it, nor see jobs.
    browser.get(f"{server.url}/queues/orders/purge")
    refusal = browser.find_element(By.CLASS_NAME, "refusal").text
    assert "forbidden" in refusal and "manage" in refusal, refusal
    shot(browser, "refused")
    browser.get(f"{server.url}/queues/jobs/messages")
    assert "forbidden" in browser.find_element(By.CLASS_NAME, "refusal").text
