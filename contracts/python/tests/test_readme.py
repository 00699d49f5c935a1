"""The README's snippet is examples/quickstart.py, and it works as shown."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

from .server import PYROOT, Server, client_for

EXAMPLE = os.path.join(PYROOT, "examples", "quickstart.py")


class ReadmeTest(unittest.TestCase):
    def test_readme_embeds_the_example_exactly(self) -> None:
        with open(EXAMPLE) as f:
            example = f.read()
        with open(os.path.join(PYROOT, "README.md")) as f:
            readme = f.read()
        self.assertLessEqual(len(example.splitlines()), 10)
        self.assertIn("```python\n" + example + "```\n", readme)

    def test_the_example_waits_for_approval_and_runs(self) -> None:
        # Under the policy that ships (deploy/policy.yaml), the rule the README names holds the call.
        server = Server(self, policy=os.path.join(PYROOT, "..", "..", "deploy", "policy.yaml"))
        env = dict(os.environ, COUNTERSIGN_URL=server.url + "/v1", COUNTERSIGN_TOKEN=server.token,
                   PYTHONPATH=os.path.join(PYROOT, "src"))
        with client_for(server).events() as events:
            proc = subprocess.Popen([sys.executable, EXAMPLE], env=env, stdout=subprocess.PIPE, text=True)
            self.addCleanup(proc.wait)
            self.addCleanup(proc.kill)
            for ev in events:
                if ev.kind == "requested":
                    break
            self.assertEqual((ev.data["run"]["id"], ev.data["tool_call"]["name"]), ("run-1", "payments_send"))
            self.assertEqual(ev.data["policy"]["rule"], "payments")
            self.assertIsNone(proc.poll(), "the example finished before anyone approved")
            client_for(server, "alice").approve(ev.data["event_id"])
        out, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(out, "sent 1250 EUR to Globex GmbH\n")


