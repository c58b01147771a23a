"""Fixtures of the console's browser suite: a real fila-server with tokens
and its web console on ephemeral loopback ports, the fila CLI to fill it,
and headless Chromium (Debian's, driven through Debian's ChromeDriver).

The binaries come from FILA_BIN_DIR (scripts/console-tests.sh builds them
into target/debug). Screenshots go to FILA_SCREENSHOTS (default
target/console-screenshots). Every server and browser is stopped when its
fixture ends."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.environ.get("FILA_BIN_DIR", os.path.join(ROOT, "target", "debug"))
SHOTS = os.environ.get("FILA_SCREENSHOTS", os.path.join(ROOT, "target", "console-screenshots"))
START_SECS = 30
LINE = re.compile(r"fila-server listening listen=(\S+) .*console=(\S+)")

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


class Server:
    """One fila-server process with tokens, its console on."""

    def __init__(self, d):
        self.dir = d
        self.proc = None
        self.addr = None
        self.console = None
        self.log = []

    def start(self):
        config = os.path.join(self.dir, "fila.toml")
        with open(config, "w") as f:
            f.write(CONFIG)
        self.proc = subprocess.Popen(
            [
                os.path.join(BIN_DIR, "fila-server"),
                "--config", config,
                "--listen", "127.0.0.1:0",
                "--console-listen", "127.0.0.1:0",
                "--sqs-listen", "off",
                "--metrics-listen", "off",
                "--data-dir", os.path.join(self.dir, "data"),
                "--shards", "2",
                "--event-loops", "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        found = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.log.append(line)
                m = LINE.search(line)
                if m and not found.is_set():
                    self.addr, self.console = m.group(1), m.group(2)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(START_SECS) or self.console is None:
            self.stop()
            raise RuntimeError("fila-server did not start:\n" + "".join(self.log[-20:]))
        return self

    @property
    def url(self):
        return "http://" + self.console

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def fila(self, *args, stdin=None):
        """Runs the fila CLI as the admin token; answers its output."""
        out = subprocess.run(
            [os.path.join(BIN_DIR, "fila"), "--addr", self.addr, "--token", ADMIN]
            + list(args),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise AssertionError(f"fila {args} exited {out.returncode}: {out.stderr}")
        return out.stdout


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
