"""The README's boto3 example runs as written (pointed at this suite's
server)."""

import contextlib
import io
import os
import re

from conftest import ROOT


def test_the_readme_boto3_example_runs(server):
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = [b for b in re.findall(r"```python\n(.*?)```", f.read(), re.S) if "import boto3" in b]
    assert len(blocks) == 1, "one boto3 example in the README"
    code = blocks[0].replace("http://127.0.0.1:9324", server.endpoint)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue() == "welcome alice@example.com\n"
