"""The README's Python consumer runs as written (pointed at this suite's
server), in a process of its own: it prints each message and deletes it."""

import os
import re
import subprocess
import sys

from conftest import ROOT, until


def test_the_readme_consumer_runs(server, client):
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = [b for b in re.findall(r"```python\n(.*?)```", f.read(), re.S) if "import fila" in b]
    assert len(blocks) == 1, "one consumer with the fila package in the README"
    code = blocks[0].replace("127.0.0.1:7700", server.addr)
    client.create_queue("jobs")
    client.put("jobs", [b"resize photo 17", b"resize photo 18"])
    proc = subprocess.Popen([sys.executable, "-u", "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for _ in range(2):
            lines.append(proc.stdout.readline().strip())
        assert lines == ["resize photo 17", "resize photo 18"]
        assert until(lambda: client.stats("jobs")["deletes"] == 2)
    finally:
        proc.kill()
        proc.wait()
