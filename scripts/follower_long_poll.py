"""Long polls through a follower's SQS endpoint (scripts/follower-long-poll.sh):
40 times, a ReceiveMessage waiting on the follower and a message sent through
the leader a random 300-350 ms later: how long after the send the receive is
answered; then 50 idle long polls on the follower for 10 s: the nodes' CPU.

    follower_long_poll.py LEADER_SQS_PORT FOLLOWER_SQS_PORT PID,PID,PID
"""

import random
import statistics
import sys
import threading
import time

import boto3
import botocore.config


def client(port):
    return boto3.client(
        "sqs",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="any",
        aws_secret_access_key="any",
        config=botocore.config.Config(retries={"max_attempts": 8, "mode": "standard"}, read_timeout=40),
    )


def ticks(pids):
    """User and system clock ticks of the processes."""
    total = 0
    for p in pids:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def main():
    lead_port, follower_port = int(sys.argv[1]), int(sys.argv[2])
    pids = [int(p) for p in sys.argv[3].split(",")]
    lead, follower = client(lead_port), client(follower_port)
    url = lead.create_queue(QueueName="long-poll")["QueueUrl"]
    on_follower = url.replace(str(lead_port), str(follower_port))
    late = []
    for i in range(40):
        got = {}

        def poll():
            r = follower.receive_message(QueueUrl=on_follower, WaitTimeSeconds=5)
            got["at"] = time.monotonic()
            got["messages"] = r.get("Messages", [])

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.3 + random.random() * 0.05)
        sent = time.monotonic()
        lead.send_message(QueueUrl=url, MessageBody=f"m{i}")
        t.join(30)
        assert len(got["messages"]) == 1, got
        follower.delete_message(QueueUrl=on_follower, ReceiptHandle=got["messages"][0]["ReceiptHandle"])
        late.append((got["at"] - sent) * 1000)
    late.sort()
    print(
        "send -> answer of a follower's long poll: p50 %.1f ms, p90 %.1f ms, max %.1f ms (40)"
        % (statistics.median(late), late[int(len(late) * 0.9)], late[-1])
    )
    idle = lead.create_queue(QueueName="idle")["QueueUrl"].replace(str(lead_port), str(follower_port))
    stop = time.monotonic() + 10

    def waiter():
        c = client(follower_port)
        while time.monotonic() < stop:
            c.receive_message(QueueUrl=idle, WaitTimeSeconds=2)

    before = ticks(pids)
    waiters = [threading.Thread(target=waiter) for _ in range(50)]
    for t in waiters:
        t.start()
    for t in waiters:
        t.join()
    print("50 idle long polls on a follower for 10 s: the nodes' CPU %.2f s" % ((ticks(pids) - before) / 100))


if __name__ == "__main__":
    main()
