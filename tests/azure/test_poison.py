"""The queue trigger's poison rule, by a small host that follows the
Azure Functions queue trigger's algorithm against fila: it gets a batch,
runs the handler on each message, deletes it on success, on failure makes
it visible again; a message whose dequeue count has reached the maximum
(5) when its handler fails is put on `<queue>-poison` and deleted."""

import time

from azure.core.exceptions import ResourceExistsError

MAX_DEQUEUE_COUNT = 5


class TriggerHost:
    """The trigger's loop, as the Functions host runs it (batch size 16,
    new batch threshold ignored, visibility timeout on failure 0)."""

    def __init__(self, service, queue_name, handler):
        self.queue = service.get_queue_client(queue_name)
        self.poison = service.get_queue_client(queue_name + "-poison")
        self.handler = handler

    def poll_once(self):
        got = list(self.queue.receive_messages(messages_per_page=16, visibility_timeout=600))
        for m in got:
            try:
                self.handler(m.content)
            except Exception:  # noqa: BLE001  (the handler's failure is the point)
                if m.dequeue_count >= MAX_DEQUEUE_COUNT:
                    try:
                        self.poison.create_queue()
                    except ResourceExistsError:
                        pass
                    self.poison.send_message(m.content)
                    self.queue.delete_message(m)
                else:
                    self.queue.update_message(m.id, m.pop_receipt, visibility_timeout=0)
            else:
                self.queue.delete_message(m)
        return len(got)


def test_a_message_that_fails_five_times_goes_to_the_poison_queue(service, queue):
    seen = []

    def handler(content):
        seen.append(content)
        if content == "bad":
            raise RuntimeError("handler failed")

    queue.send_message("bad")
    queue.send_message("good")
    host = TriggerHost(service, queue.queue_name, handler)
    deadline = time.monotonic() + 30
    while host.poll_once() and time.monotonic() < deadline:
        pass
    assert seen.count("bad") == MAX_DEQUEUE_COUNT
    assert seen.count("good") == 1
    assert queue.peek_messages() == []
    poisoned = list(service.get_queue_client(queue.queue_name + "-poison").receive_messages())
    assert [m.content for m in poisoned] == ["bad"]
    service.delete_queue(queue.queue_name + "-poison")
