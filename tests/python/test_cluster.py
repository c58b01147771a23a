"""fila's Python client on a cluster (docs/cluster.md): three real
fila-server processes, three partitions each led by another node. A
client given one node follows each `not_leader` to the leader it names
and keeps that queue's route, so later calls go straight there; with
`follow_leader=False` the refusal is the caller's."""

import time

import pytest

import fila
from conftest import until
from fila_server import ClusterNode, running_cluster


def partition_leaders(node, within=60):
    deadline = time.monotonic() + within
    status = None
    while time.monotonic() < deadline:
        status = node.status()
        leaders = [p.get("leader") for p in status.get("partitions", [])] if status else []
        if len(leaders) == 3 and None not in leaders and len(set(leaders)) == 3:
            return leaders
        time.sleep(0.1)
    raise AssertionError(f"the partitions' leaders never spread: {status}")


@pytest.fixture(scope="module")
def nodes():
    listeners = 'sqs_listen = "off"\nazure_listen = "off"\nmetrics_listen = "off"\nconsole_listen = "off"'
    with running_cluster(ClusterNode, listeners, partitions=3) as started:
        partition_leaders(started[1])
        yield started


def test_not_leader_is_followed_and_each_queues_route_kept(nodes):
    addrs = {i: n.addr for i, n in nodes.items()}
    with fila.Client(addrs[1]) as c:
        names = [f"jobs-{i}" for i in range(9)]
        for name in names:
            c.create_queue(name)
        for name in names:
            c.put(name, [b"%s %d" % (name.encode(), i) for i in range(3)])
        for name in names:
            got = []
            while len(got) < 3:
                got += c.receive(name, max=3, wait_ms=2_000)
            assert sorted(m.payload for m in got) == [b"%s %d" % (name.encode(), i) for i in range(3)]
            c.delete(name, [m.receipt for m in got])
        routes = dict(c._a._routes)
        # Queues of partitions node 1 does not lead were learnt: each
        # routed to another node's client address.
        assert routes, "no queue's partition was led elsewhere"
        assert set(routes.values()) <= {addrs[2], addrs[3]}
        assert c.addr == addrs[1]
        assert sorted(c.list_queues()) == names
        status = c.cluster_status()
        assert len(status.partitions) == 3 and len(status.members) == 3
        routed = next(iter(routes))
    with fila.Client(addrs[1], follow_leader=False) as c:
        with pytest.raises(fila.NotLeader) as e:
            c.stats(routed)
        assert e.value.kind == "not_leader" and "leader" in e.value.message
        assert fila._addr.leader_of(e.value.message) == routes[routed]


def test_membership_changes_are_sent_and_refused_by_the_cluster_when_unsound(nodes):
    with fila.Client(",".join(n.addr for n in nodes.values())) as c:
        # Well-formed requests the cluster refuses for what they ask (a
        # malformed one would answer malformed_frame).
        with pytest.raises(fila.InvalidArgument):
            c.promote(99)
        c.remove_node(99)  # not a member: nothing to remove, no error
        assert len(c.cluster_status().members) == 3
        with pytest.raises(fila.InvalidArgument):
            c.move_replicas(99, 98, "127.0.0.1:1", "127.0.0.1:2")
        before = c.cluster_status()
        assert before.leader is not None
        with fila.Client(nodes[before.leader].addr) as leader:
            leader.transfer_leader()
        # Another node leads the metadata group now, in a later term (the
        # view of the node asked catches up with it).
        assert until(lambda: c.cluster_status().term > before.term, secs=30)
        # The queues' leaders moved: calls follow the new ones.
        c.put("jobs-0", b"after the transfer")
        got = c.receive("jobs-0", wait_ms=5_000)
        assert [m.payload for m in got] == [b"after the transfer"]
