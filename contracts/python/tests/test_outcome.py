"""The outcome after execution: the claimant reports how a call ended (succeeded or failed), once, by
itself in @gated, against a real `countersign serve`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import unittest
from typing import Any, Dict, List, Optional, Tuple

import countersign
from countersign import (Client, NotClaimed, NotPermitted, OutcomeReported, ToolCall, gated, new_claim_id,
                         new_report_id)
from countersign._core import MAX_SUMMARY_BYTES, summary_text
from countersign.errors import NetworkError

from .server import AGENT_SUBJECT, HERE, Server, async_client_for, client_for, visible

PAYMENT: ToolCall = {"id": "call-pay", "name": "send_payment",
                     "arguments": {"amount": 700, "currency": "EUR", "recipient": "Hooli"}}


class Reporting(Client):
    """A client that keeps the reports it sends; lose=n loses the answers of the first n (the server
    applies them, the client sees the connection fail)."""

    def __init__(self, url: str, token: str, lose: int = 0) -> None:
        super().__init__(url, token, min_backoff=0.01, max_backoff=0.05)
        self.sent: List[Tuple[str, Any]] = []
        self.lose = lose

    def _once(self, method: str, path: str, payload: Optional[bytes], *args: Any) -> Tuple[int, bytes]:
        answer = super()._once(method, path, payload, *args)
        if path.endswith("/outcome"):
            self.sent.append((path, payload))
            if self.lose > 0:
                self.lose -= 1
                raise NetworkError("the connection was reset")
        return answer


class OutcomeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.alice = client_for(self.server, "alice")
        self.pool = concurrent.futures.ThreadPoolExecutor(2)
        self.addCleanup(self.pool.shutdown)
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}

    def reporting(self, lose: int = 0) -> Reporting:
        return Reporting(self.server.url, self.server.token, lose)

    def approved(self, fn: Any) -> Tuple[str, "concurrent.futures.Future[Any]"]:
        """Runs fn(PAYMENT) in a thread and approves the call while it waits."""
        running = self.pool.submit(fn, PAYMENT)
        event_id = visible(self.server, self.run_, PAYMENT)
        self.alice.approve(event_id)
        return event_id, running

    def execution(self, event_id: str) -> Dict[str, Any]:
        rec, _ = client_for(self.server).approval(event_id)
        return rec.get("execution") or {}

    def test_a_call_that_returns_is_reported_succeeded_once(self) -> None:
        client = self.reporting()

        @gated(client, run=self.run_)
        def send_payment(amount: float, currency: str, recipient: str) -> str:
            return f"sent {amount}"

        event_id, running = self.approved(send_payment.invoke)
        self.assertEqual(running.result(timeout=60), "sent 700")
        x = self.execution(event_id)
        self.assertEqual((x["status"], x["reported_by"]), ("succeeded", AGENT_SUBJECT))
        self.assertEqual(len(client.sent), 1)
        again = send_payment.invoke(PAYMENT)
        self.assertEqual(getattr(again, "verdict", None), "already_executed")
        self.assertEqual(len(client.sent), 1)
        self.assertEqual(self.execution(event_id), x)

    def test_a_call_that_raises_is_reported_failed_and_the_exception_goes_on(self) -> None:
        client = self.reporting()
        boom = RuntimeError("card declined: insufficient funds")

        @gated(client, run=self.run_)
        def send_payment(amount: float, currency: str, recipient: str) -> str:
            raise boom

        event_id, running = self.approved(send_payment.invoke)
        with self.assertRaises(RuntimeError) as caught:
            running.result(timeout=60)
        self.assertIs(caught.exception, boom)
        x = self.execution(event_id)
        self.assertEqual((x["status"], x["summary"]), ("failed", "card declined: insufficient funds"))
        self.assertEqual(len(client.sent), 1)

    def test_a_long_message_is_cut_to_1_kib_on_a_character_boundary(self) -> None:
        message = "\x1b[31m" + "é€😀" * 200

        @gated(client_for(self.server), run=self.run_)
        def send_payment(amount: float, currency: str, recipient: str) -> str:
            raise ValueError(message)

        event_id, running = self.approved(send_payment.invoke)
        with self.assertRaises(ValueError):
            running.result(timeout=60)
        summary = self.execution(event_id)["summary"]
        self.assertEqual(summary, summary_text(message))
        self.assertTrue(MAX_SUMMARY_BYTES - 4 < len(summary.encode()) <= MAX_SUMMARY_BYTES)
        self.assertTrue(message.replace("\x1b", " ").startswith(summary))

    def test_a_report_whose_answer_was_lost_is_sent_again_with_the_same_id(self) -> None:
        client = self.reporting(lose=1)

        @gated(client, run=self.run_)
        def send_payment(amount: float, currency: str, recipient: str) -> str:
            return "sent"

        event_id, running = self.approved(send_payment.invoke)
        self.assertEqual(running.result(timeout=60), "sent")
        self.assertEqual(len(client.sent), 2)
        self.assertEqual(client.sent[0], client.sent[1])
        self.assertEqual(self.execution(event_id)["status"], "succeeded")

    def test_a_report_the_server_refuses_does_not_mask_the_result(self) -> None:
        client = client_for(self.server)
        ids: List[str] = []

        @gated(client, run=self.run_)
        def send_payment(amount: float, currency: str, recipient: str) -> str:
            # The tool reports for itself first: @gated's own report is then a second one.
            client.report(ids[0], {"status": "succeeded", "summary": "reported by the tool"})
            return "sent"

        ids.append(countersign.event_id_for(self.run_, "call-pay"))
        with self.assertLogs("countersign", "WARNING") as logs:
            event_id, running = self.approved(send_payment.invoke)
            self.assertEqual(running.result(timeout=60), "sent")
        self.assertEqual(event_id, ids[0])
        self.assertIn("outcome_reported", "".join(logs.output))
        self.assertEqual(self.execution(event_id)["summary"], "reported by the tool")

    def test_a_call_the_policy_allows_has_no_claim_and_no_report(self) -> None:
        client = self.reporting()

        @gated(client, run=self.run_)
        def search_web(q: str) -> str:
            return q

        self.assertEqual(search_web(q="x"), "x")
        self.assertEqual(client.sent, [])

    def test_report_is_once_per_claim(self) -> None:
        other = client_for(self.server, "other-agent")
        run = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        (res,) = other.review(run, [PAYMENT])
        with self.assertRaises(NotClaimed):
            other.report(res.event_id, {"status": "succeeded"})
        self.alice.approve(res.event_id)
        other.claim(res.event_id, new_claim_id())
        with self.assertRaises(NotPermitted):  # the development token sees the approval but did not claim it
            client_for(self.server).report(res.event_id, {"status": "succeeded"})
        command_id = new_report_id()
        first = other.report(res.event_id, {"status": "failed", "summary": "timeout"}, command_id=command_id)
        again = other.report(res.event_id, {"status": "failed", "summary": "timeout"}, command_id=command_id)
        self.assertEqual(first["execution"], again["execution"])
        self.assertEqual(first["execution"]["command_id"], command_id)
        with self.assertRaises(OutcomeReported):
            other.report(res.event_id, {"status": "succeeded"})
        with self.assertRaises(ValueError):
            other.report(res.event_id, {"status": "done"})  # type: ignore[typeddict-item]

    def test_a_runner_that_dies_after_its_claim_leaves_no_execution(self) -> None:
        env = dict(os.environ, COUNTERSIGN_URL=self.server.url, COUNTERSIGN_TOKEN=self.server.token,
                   MARKER=self.server.data + "-marker", RUN_ID=self.id(),
                   PYTHONPATH=os.path.join(os.path.dirname(HERE), "src"))
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "agent_proc.py"), "crash"], env=env,
                                stdout=subprocess.DEVNULL)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        call: ToolCall = {"id": "call-crash", "name": "send_payment",
                          "arguments": {"amount": 700, "currency": "EUR", "recipient": "Hooli"}}
        event_id = visible(self.server, {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}, call)
        self.alice.approve(event_id)
        self.assertEqual(proc.wait(timeout=60), 17, "the runner did not die inside the tool")
        rec, _ = client_for(self.server).approval(event_id)
        self.assertEqual(rec["claim"]["by"], AGENT_SUBJECT)
        self.assertNotIn("execution", rec)


class AsyncOutcomeTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.alice = async_client_for(self.server, "alice")
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}

    async def test_async_gated_reports_succeeded_and_failed(self) -> None:
        for client in (async_client_for(self.server), client_for(self.server)):
            for fails in (False, True):
                call: ToolCall = dict(PAYMENT, id=f"call-{type(client).__name__}-{fails}")  # type: ignore[assignment]

                @gated(client, run=self.run_)
                async def send_payment(amount: float, currency: str, recipient: str) -> str:
                    if fails:
                        raise RuntimeError("payments service unavailable")
                    return "sent"

                running = asyncio.ensure_future(send_payment.invoke(call))
                (res,) = await async_client_for(self.server).review(self.run_, [call])
                await self.alice.approve(res.event_id)
                if fails:
                    with self.assertRaises(RuntimeError):
                        await running
                else:
                    self.assertEqual(await running, "sent")
                rec, _ = await async_client_for(self.server).approval(res.event_id)
                self.assertEqual(rec["execution"]["status"], "failed" if fails else "succeeded")
                if fails:
                    self.assertEqual(rec["execution"]["summary"], "payments service unavailable")


if __name__ == "__main__":
    unittest.main()
