"""Fixtures of the console's browser suite: a real fila-server with tokens
and its web console on ephemeral loopback ports, the fila CLI to fill it,
and headless Chromium (Debian's, driven through Debian's ChromeDriver).

The binaries come from FILA_BIN_DIR (scripts/console-tests.sh builds them
into target/debug). Screenshots go to FILA_SCREENSHOTS (default
target/console-screenshots). Every server and browser is stopped when its
fixture ends."""

import os
import shutil
import sys
import tempfile

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fila_server import ROOT, FilaServer  # noqa: E402  (tests/fila_server.py)

SHOTS = os.environ.get("FILA_SCREENSHOTS", os.path.join(ROOT, "target", "console-screenshots"))

ADMIN = "admin-secret-token"
READER = "reader-secret-token"
CONFIG = f"""
[[tokens]]
id = "admin"
token = "{ADMIN}"
[[tokens.grants]]
queues = "*"
permissions = ["send", "receive", "manage"]

[[tokens]]
id = "reader"
token = "{READER}"
[[tokens.grants]]
queues = "orders"
permissions = ["receive"]
"""


class Server(FilaServer):
    """One fila-server process with tokens, its console on."""

    def __init__(self, d):
        super().__init__()
        self.dir = d

    def args(self):
        config = os.path.join(self.dir, "fila.toml")
        with open(config, "w") as f:
            f.write(CONFIG)
        return [
            "--config", config,
            "--listen", "127.0.0.1:0",
            "--console-listen", "127.0.0.1:0",
            "--sqs-listen", "off",
            "--azure-listen", "off",
            "--metrics-listen", "off",
            "--data-dir", os.path.join(self.dir, "data"),
            "--shards", "2",
            "--event-loops", "2",
        ]

    @property
    def url(self):
        return "http://" + self.listening["console"]

    def fila(self, *args, stdin=None):
        """Runs the fila CLI as the admin token; answers its output."""
        return self.run_fila(args, token=ADMIN, stdin=stdin).stdout


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d:
        s = Server(d).start()
        try:
            yield s
        finally:
            s.stop()


def chromium_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    pytest.fail("Chromium is not installed (scripts/console-tests.sh installs it)")


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium_path()
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--force-device-scale-factor=1",
    ):
        opts.add_argument(a)
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    d = webdriver.Chrome(service=Service(driver_path), options=opts)
    d.set_page_load_timeout(30)
    try:
        yield d
    finally:
        d.quit()


@pytest.fixture(scope="module")
def shot():
    os.makedirs(SHOTS, exist_ok=True)

    def take(driver, name):
        driver.save_screenshot(os.path.join(SHOTS, name + ".png"))

    return take
