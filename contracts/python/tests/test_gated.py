"""@gated on sync tools, against a real `countersign serve`."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import unittest
from typing import Any, Dict, List

from countersign import CallDenied, Denied, ToolCall, event_id_for, gated

from .server import HERE, Server, client_for, visible


class Payments:
    """A tool with a visible side effect: the payments it sent."""

    def __init__(self) -> None:
        self.sent: List[Dict[str, Any]] = []
        self._lock = threading.Lock()

    def send(self, amount: float, currency: str, recipient: str) -> str:
        with self._lock:
            self.sent.append({"amount": amount, "currency": currency, "recipient": recipient})
        return f"sent {amount} {currency} to {recipient}"


class GatedSyncTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.agent = client_for(self.server)
        self.alice = client_for(self.server, "alice")
        self.pool = concurrent.futures.ThreadPoolExecutor(2)
        self.addCleanup(self.pool.shutdown)
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}

    def test_allowed_call_runs_at_once(self) -> None:
        calls: List[str] = []

        @gated(self.agent, run=self.run_)
        def search_web(q: str) -> str:
            calls.append(q)
            return "results for " + q

        self.assertEqual(search_web(q="Globex invoice"), "results for Globex invoice")
        self.assertEqual(calls, ["Globex invoice"])

    def test_policy_denial_returns_the_reason_and_does_not_run(self) -> None:
        calls: List[str] = []

        @gated(self.agent, run=self.run_)
        def shell_exec(cmd: str) -> str:
            calls.append(cmd)
            return "ran"

        out = shell_exec(cmd="rm -rf /")
        self.assertIsInstance(out, Denied)
        assert isinstance(out, Denied)
        self.assertEqual(out.verdict, "denied")
        self.assertEqual(str(out), "Agents may not run shell commands. Ask a human operator instead.")
        self.assertEqual(calls, [])

    def test_gated_call_waits_and_runs_once_after_approval(self) -> None:
        pay = Payments()
        tool = gated(self.agent, run=self.run_, name="send_payment")(pay.send)
        args = {"amount": 1250, "currency": "EUR", "recipient": "Globex GmbH"}
        fut = self.pool.submit(tool, **args)
        event_id = visible(self.server, self.run_, tool.tool_call(**args))
        self.assertEqual(pay.sent, [], "the tool ran before a human decided")
        self.assertFalse(fut.done())
        self.alice.approve(event_id, comment="invoice checked")
        self.assertEqual(fut.result(timeout=60), "sent 1250 EUR to Globex GmbH")
        self.assertEqual(pay.sent, [args])
        rec, _ = self.agent.approval(event_id)
        self.assertEqual(rec["status"], "approved")
        self.assertIsNotNone(rec.get("claim"), "the run was not claimed before the tool ran")
        # The same call again (a re-run of the same step) does not run twice.
        again = tool(**args)
        self.assertIsInstance(again, Denied)
        assert isinstance(again, Denied)
        self.assertEqual(again.verdict, "already_executed")
        self.assertEqual(len(pay.sent), 1)

    def test_rejection_returns_the_reason_for_the_model(self) -> None:
        pay = Payments()
        tool = gated(self.agent, run=self.run_, name="send_payment")(pay.send)
        call = {"id": "toolu_01", "type": "tool_use", "name": "send_payment",
                "input": {"amount": 90, "currency": "EUR", "recipient": "Initech"}}
        fut = self.pool.submit(tool.invoke, call)
        event_id = visible(self.server, self.run_, {"id": "toolu_01", "name": "send_payment",
                                                     "arguments": call["input"]})
        self.alice.reject(event_id, "wrong account: pay Initech AG")
        out = fut.result(timeout=60)
        self.assertIsInstance(out, Denied)
        assert isinstance(out, Denied)
        self.assertEqual(out.verdict, "denied")
        self.assertIn("wrong account: pay Initech AG", str(out))
        self.assertEqual(out.event_id, event_id)
        self.assertEqual(pay.sent, [])

    def test_raise_on_deny_raises_call_denied_with_the_reason(self) -> None:
        pay = Payments()
        tool = gated(self.agent, run=self.run_, name="send_payment", raise_on_deny=True)(pay.send)
        call = {"id": "call_9", "type": "function",
                "function": {"name": "send_payment",
                             "arguments": json.dumps({"amount": 5, "currency": "EUR", "recipient": "X"})}}
        fut = self.pool.submit(tool.invoke, call)
        event_id = visible(self.server, self.run_, {"id": "call_9", "name": "send_payment",
                                                     "arguments": {"amount": 5, "currency": "EUR", "recipient": "X"}})
        self.alice.reject(event_id, "not this month")
        with self.assertRaises(CallDenied) as cm:
            fut.result(timeout=60)
        self.assertIn("not this month", cm.exception.reason)
        self.assertEqual(cm.exception.denied.verdict, "denied")
        self.assertEqual(pay.sent, [])

    def test_an_edit_runs_with_the_edited_arguments(self) -> None:
        pay = Payments()
        tool = gated(self.agent, run=self.run_, name="send_payment")(pay.send)
        call: ToolCall = {"id": "call-edit", "name": "send_payment",
                          "arguments": {"amount": 1250, "currency": "EUR", "recipient": "Globex"}}
        fut = self.pool.submit(tool.invoke, call)
        event_id = visible(self.server, self.run_, call)
        self.assertEqual(event_id, event_id_for(self.run_, "call-edit"))
        self.alice.edit(event_id, {"amount": 1200, "currency": "EUR", "recipient": "Globex GmbH"}, "discount")
        self.assertEqual(fut.result(timeout=60), "sent 1200 EUR to Globex GmbH")
        self.assertEqual(pay.sent, [{"amount": 1200, "currency": "EUR", "recipient": "Globex GmbH"}])

    def test_a_bounded_wait_returns_pending_and_runs_nothing(self) -> None:
        pay = Payments()
        tool = gated(self.agent, run=self.run_, name="send_payment", wait=0.5)(pay.send)
        out = tool(amount=1, currency="EUR", recipient="Nobody")
        self.assertIsInstance(out, Denied)
        assert isinstance(out, Denied)
        self.assertEqual(out.verdict, "pending")
        self.assertIn("waiting", str(out))
        self.assertEqual(pay.sent, [])

    def test_a_crash_between_claim_and_run_never_runs_twice(self) -> None:
        marker = os.path.join(self.server.data + "-marker")
        env = dict(os.environ, COUNTERSIGN_URL=self.server.url, COUNTERSIGN_TOKEN=self.server.token,
                   MARKER=marker, RUN_ID=self.id(), PYTHONPATH=os.path.join(os.path.dirname(HERE), "src"))
        agent = os.path.join(HERE, "agent_proc.py")
        first = subprocess.Popen([sys.executable, agent, "crash"], env=env, stdout=subprocess.DEVNULL)
        self.addCleanup(first.wait)
        self.addCleanup(first.kill)
        call: ToolCall = {"id": "call-crash", "name": "send_payment",
                          "arguments": {"amount": 700, "currency": "EUR", "recipient": "Hooli"}}
        event_id = visible(self.server, {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}, call)
        self.alice.approve(event_id)
        self.assertEqual(first.wait(timeout=60), 17, "the first run did not die inside the tool")
        with open(marker) as f:
            self.assertEqual(f.read().splitlines(), ["started"])
        second = subprocess.run([sys.executable, agent, "rerun"], env=env, capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(second.returncode, 0, second.stderr)
        out = json.loads(second.stdout)
        self.assertEqual(out["verdict"], "already_executed")
        self.assertIn("will not run again", out["reason"])
        with open(marker) as f:
            self.assertEqual(f.read().splitlines(), ["started"], "the tool ran a second time")

    def test_run_may_be_a_function_of_the_current_context(self) -> None:
        current = threading.local()
        seen: List[str] = []

        @gated(self.agent, run=lambda: {"id": current.run_id, "agent": "research-bot"})
        def search_docs(q: str) -> str:
            seen.append(current.run_id)
            return q

        current.run_id = "run-a"
        self.assertEqual(search_docs("x"), "x")
        self.assertEqual(seen, ["run-a"])


if __name__ == "__main__":
    unittest.main()
