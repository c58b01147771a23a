"""The README's Azure example runs as written (its development connection
string pointed at this suite's server), and the long form of that string
it gives is the development account's."""

import contextlib
import io
import os
import re

from conftest import KEY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_the_readme_azure_example_runs(server, service):
    text = readme()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "azure.storage.queue" in b]
    assert len(blocks) == 1, "one Azure example in the README"
    service.create_queue("emails")
    code = blocks[0].replace('"UseDevelopmentStorage=true"', repr(server.connection_string()))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue() == "welcome bob@example.com 1\n"
    service.delete_queue("emails")
    # The long form it gives names the development account and its key.
    assert f"AccountName=devstoreaccount1;AccountKey={KEY};QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;" in text
