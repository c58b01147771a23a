"""The web console on a cluster (docs/cluster.md), in headless Chromium:
three fila-server processes, each with its console; a browser signed in
on a follower sees the queues, a queue's figures and its messages as the
leader holds them (the follower forwards each call), and the server
section shows the Raft group's state and the partition's figures."""

import json
import time

import pytest
from selenium.webdriver.common.by import By

from conftest import ADMIN, CONFIG
from fila_server import ClusterNode, running_cluster
from test_console import figure, sign_in, text_of, wait


class Node(ClusterNode):
    """One node of the cluster, its console on."""

    @property
    def url(self):
        return "http://" + self.listening["console"]

    def fila(self, *args):
        return self.run_fila(args, token=ADMIN).stdout


@pytest.fixture(scope="module")
def nodes():
    listeners = 'console_listen = "127.0.0.1:0"\nsqs_listen = "off"\nazure_listen = "off"\nmetrics_listen = "off"'
    with running_cluster(Node, listeners, extra=CONFIG) as started:
        yield started


def test_a_follower_s_console_shows_the_partition(nodes, browser, shot):
    deadline = time.monotonic() + 30
    leader = None
    while leader is None and time.monotonic() < deadline:
        leader = next((n.leader(ADMIN) for n in nodes.values() if n.leader(ADMIN)), None)
        if leader is None:
            time.sleep(0.1)
    assert leader is not None, "no leader"
    follower = nodes[next(i for i in nodes if i != leader)]
    # Filled through the leader's binary protocol.
    nodes[leader].fila("queue", "create", "orders")
    seqs = [
        e["seq"]
        for e in json.loads(
            nodes[leader].fila("--json", "put", "orders", "first", '{"order":42}', "third")
        )
    ]

    sign_in(browser, follower, ADMIN)
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Queues", "the overview")
    wait(browser, lambda d: d.find_elements(By.LINK_TEXT, "orders"), "the queue in the list")
    # The server section: the Raft group's state, the partition's figures
    # (sampled from the leader once a second).
    wait(
        browser,
        lambda d: f"leader {leader}" in text_of(d, By.ID, "server"),
        "the cluster's state",
    )
    wait(
        browser,
        lambda d: "1 of" in text_of(d, By.XPATH, "//section[@id='server']//tr[th='Queues']/td"),
        "the partition's queue count",
    )
    assert "cluster node" in text_of(
        browser, By.XPATH, "//section[@id='server']//tr[th='Log']/td"
    )
    shot(browser, "cluster")

    browser.get(follower.url + "/queues/orders")
    wait(browser, lambda d: figure(d, "Visible") == "3", "three visible messages")
    browser.get(f"{follower.url}/queues/orders/messages/{seqs[1]}")
    payload = browser.find_element(By.CSS_SELECTOR, "pre.payload").text
    assert payload == '{\n  "order": 42\n}', payload
