"""Cancelling (DESIGN §5, single use): cancel(), what an explicit abort of a
waiting call cancels (an Abort for the blocking client, a cancelled task for
asyncio) and what a wait that merely ends leaves pending, and an approval
that lapsed before its claim, against a real `countersign serve`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import Any, List

import countersign
from countersign import (Abort, Aborted, ApprovalLapsed, Closed, Client, Denied, ToolCall, codes, gated,
                         new_claim_id)

from .relay import Relay
from .server import AGENT_SUBJECT, HERE, Server, client_for, decided, visible

PAY: ToolCall = {"id": "pay-1", "name": "send_payment", "arguments": {"amount": 10}}


def long_poll(line: str) -> bool:
    return line.startswith("POST /v1/reviews?wait=")


class CancelTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.agent = client_for(self.server)
        self.alice = client_for(self.server, "alice")
        self.run_: countersign.Run = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        self.pool = concurrent.futures.ThreadPoolExecutor(2)
        self.addCleanup(self.pool.shutdown)

    def relayed(self, **kw: Any) -> "tuple[Relay, Client]":
        relay = Relay(self, self.server.url)
        return relay, Client(relay.url, self.server.token, **kw)

    # --- cancel() -------------------------------------------------------

    def test_the_agent_cancels_a_pending_approval_it_submitted(self) -> None:
        event_id = visible(self.server, self.run_, PAY)
        rec = self.agent.cancel(event_id, "the user closed the chat") or decided(self.server, event_id)
        self.assertEqual(rec["status"], "cancelled")
        self.assertEqual(rec["request"]["submitter"], AGENT_SUBJECT)
        self.assertEqual(rec["outcome"]["decided_by"], [AGENT_SUBJECT])
        (again,) = self.agent.review(self.run_, [PAY])
        self.assertEqual(again.verdict, "cancelled")

    def test_cancelling_a_decided_approval_raises_closed_and_changes_nothing(self) -> None:
        event_id = visible(self.server, self.run_, PAY)
        self.alice.approve(event_id)
        with self.assertRaises(Closed) as cm:
            self.agent.cancel(event_id)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, codes.CLOSED))
        self.assertIsInstance(cm.exception, countersign.Refused)
        self.assertEqual(self.agent.approval(event_id)[0]["status"], "approved")

    # --- an Abort cancels ----------------------------------------------

    def test_an_abort_during_the_long_poll_cancels_the_approval_and_raises_aborted(self) -> None:
        relay, agent = self.relayed()
        stop = Abort()
        fut = self.pool.submit(agent.review, self.run_, [PAY], wait=None, abort=stop)
        relay.wait_for(long_poll)
        stop.abort("the user closed the chat")
        with self.assertRaises(Aborted) as cm:
            fut.result(timeout=30)
        self.assertEqual((cm.exception.code, cm.exception.reason), (codes.ABORTED, "the user closed the chat"))
        rec = decided(self.server, countersign.event_id_for(self.run_, PAY["id"]))
        self.assertEqual(rec["status"], "cancelled")
        self.assertEqual(rec["outcome"]["decided_by"], [AGENT_SUBJECT])

    def test_an_abort_before_the_first_answer_still_cancels_what_that_request_opened(self) -> None:
        relay, agent = self.relayed()
        stop = Abort()
        relay.before = lambda line: stop.abort("stop") if line.startswith("POST /v1/reviews ") else None
        with self.assertRaises(Aborted):
            agent.review(self.run_, [PAY], wait=None, abort=stop)
        self.assertEqual(relay.count(long_poll), 0, "no long poll began")
        self.assertEqual(decided(self.server, countersign.event_id_for(self.run_, PAY["id"]))["status"], "cancelled")

    def test_an_abort_cancels_only_the_calls_still_pending(self) -> None:
        relay, agent = self.relayed()
        calls: List[ToolCall] = [{"id": "look", "name": "search_web", "arguments": {"q": "x"}},
                                 {"id": "a", "name": "send_payment", "arguments": {"amount": 1}},
                                 {"id": "b", "name": "send_payment", "arguments": {"amount": 2}}]
        _, a, b = agent.review(self.run_, calls)
        self.alice.approve(a.event_id)
        stop = Abort()
        fut = self.pool.submit(agent.review, self.run_, calls, wait=None, abort=stop)
        relay.wait_for(long_poll)
        stop.set()  # an Abort is a threading.Event
        with self.assertRaises(Aborted):
            fut.result(timeout=30)
        self.assertEqual(self.agent.approval(a.event_id)[0]["status"], "approved")
        self.assertEqual(decided(self.server, b.event_id)["status"], "cancelled")

    def test_an_abort_of_a_gated_tool_cancels_its_approval_and_the_tool_never_runs(self) -> None:
        relay, agent = self.relayed()
        ran: List[int] = []

        @gated(agent, run=self.run_)
        def send_payment(amount: int) -> str:
            ran.append(amount)
            return "sent"

        stop = Abort()
        fut = self.pool.submit(send_payment.invoke, {"id": "pay-g", "name": "send_payment",
                                                     "arguments": {"amount": 3}}, abort=stop)
        relay.wait_for(long_poll)
        stop.abort()
        with self.assertRaises(Aborted):
            fut.result(timeout=30)
        self.assertEqual(decided(self.server, countersign.event_id_for(self.run_, "pay-g"))["status"], "cancelled")
        self.assertEqual(ran, [])

    def test_an_abort_of_ask_cancels_the_question(self) -> None:
        relay, agent = self.relayed()
        stop = Abort()
        fut = self.pool.submit(agent.ask, self.run_, "Which account?", id="q1", abort=stop)
        relay.wait_for(lambda line: line.startswith("POST /v1/questions?wait="))
        stop.abort()
        with self.assertRaises(Aborted):
            fut.result(timeout=30)
        a = self.agent.ask(self.run_, "Which account?", id="q1", wait=0)
        self.assertEqual(a.status, "cancelled")

    def test_the_abort_is_bounded_a_cancel_that_gets_no_answer_is_given_up_and_logged(self) -> None:
        relay, agent = self.relayed(cancel_on_abort=0.3)
        release = threading.Event()
        self.addCleanup(release.set)
        relay.before = lambda line: release.wait() if "/cancel " in line else None  # never answered in time
        stop = Abort()
        fut = self.pool.submit(agent.review, self.run_, [PAY], wait=None, abort=stop)
        relay.wait_for(long_poll)
        with self.assertLogs("countersign", "WARNING") as logs:
            started = time.monotonic()
            stop.abort()
            with self.assertRaises(Aborted):
                fut.result(timeout=30)
            took = time.monotonic() - started
        self.assertLess(took, 5, f"the abort took {took:.1f} s")
        event_id = countersign.event_id_for(self.run_, PAY["id"])
        self.assertIn(event_id, "\n".join(logs.output))
        self.assertEqual(self.agent.approval(event_id)[0]["status"], "pending")

    # --- a wait that merely ends cancels nothing ------------------------

    def test_a_bounded_wait_that_runs_out_leaves_the_approval_pending(self) -> None:
        relay, agent = self.relayed()
        (r,) = agent.review(self.run_, [PAY], wait=0.3, abort=Abort())
        self.assertEqual(r.verdict, "pending")
        self.assertEqual(self.agent.approval(r.event_id)[0]["status"], "pending")
        self.assertEqual(relay.count(lambda line: line.endswith("/cancel HTTP/1.1")), 0)
        # Another wait (another worker) re-attaches and gets the decision.
        fut = self.pool.submit(self.agent.review, self.run_, [PAY], wait=None)
        self.alice.approve(r.event_id)
        self.assertEqual(fut.result(timeout=60)[0].verdict, "allowed")

    def test_a_process_interrupted_while_it_waits_leaves_the_approval_pending(self) -> None:
        env = dict(os.environ, COUNTERSIGN_URL=self.server.url, COUNTERSIGN_TOKEN=self.server.token,
                   RUN_ID=self.id(), PYTHONPATH=os.path.join(os.path.dirname(HERE), "src"))
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "waiter_proc.py")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().strip(), "waiting")  # its approval exists; it waits on it
        proc.send_signal(signal.SIGINT)  # Ctrl-C: KeyboardInterrupt ends the process, no Abort
        self.assertNotEqual(proc.wait(timeout=30), 0)
        proc.stdout.close()
        event_id = countersign.event_id_for({"id": self.id(), "agent": "billing-bot"}, "pay-proc")
        self.assertEqual(self.agent.approval(event_id)[0]["status"], "pending")

    def test_with_cancel_on_abort_none_an_abort_only_stops_waiting(self) -> None:
        relay, agent = self.relayed(cancel_on_abort=None)
        event_id = visible(self.server, self.run_, PAY)
        stop = Abort()
        fut = self.pool.submit(agent.review, self.run_, [PAY], wait=None, abort=stop)
        relay.wait_for(long_poll)
        stop.abort()
        with self.assertRaises(Aborted):
            fut.result(timeout=30)
        self.assertEqual(self.agent.approval(event_id)[0]["status"], "pending")

    # --- an approval that lapsed ----------------------------------------

    def lapse(self, rec: countersign.Record) -> None:
        """Waits until the rule's claim_within (1 s) has passed since the decision: only the clock can
        say so."""
        from datetime import datetime
        decided_at = datetime.fromisoformat(rec["outcome"]["decided_at"].replace("Z", "+00:00")).timestamp()
        left = decided_at + 1.1 - time.time()
        if left > 0:
            time.sleep(left)

    def test_a_lapsed_claim_raises_approval_lapsed_once_and_a_new_review_answers_expired(self) -> None:
        relay, agent = self.relayed()
        deploy: ToolCall = {"id": "deploy-1", "name": "deploy_service", "arguments": {"version": "1.2.3"}}
        event_id = visible(self.server, self.run_, deploy)
        self.lapse(self.alice.approve(event_id))
        with self.assertRaises(ApprovalLapsed) as cm:
            agent.claim(event_id, new_claim_id())
        self.assertEqual((cm.exception.status, cm.exception.code), (409, codes.APPROVAL_LAPSED))
        self.assertIn("lapsed", cm.exception.message)
        self.assertEqual(relay.count(lambda line: "/claim " in line), 1, "a refusal is not retried")
        (again,) = agent.review(self.run_, [deploy])
        self.assertEqual((again.verdict, again.code), ("expired", codes.APPROVAL_LAPSED))

    def test_a_gated_tool_whose_claim_finds_the_approval_lapsed_returns_expired_and_does_not_run(self) -> None:
        relay, agent = self.relayed()
        ran: List[str] = []

        @gated(agent, run=self.run_)
        def deploy_service(version: str) -> str:
            ran.append(version)
            return "deployed"

        call: ToolCall = {"id": "deploy-2", "name": "deploy_service", "arguments": {"version": "1.2.4"}}
        rec = self.alice.approve(visible(self.server, self.run_, call))
        # The review still answers allowed; the claim is held back until the approval lapsed.
        relay.before = lambda line: self.lapse(rec) if "/claim " in line else None
        out = deploy_service.invoke(call)
        self.assertIsInstance(out, Denied)
        assert isinstance(out, Denied)
        self.assertEqual((out.verdict, out.code), ("expired", codes.APPROVAL_LAPSED))
        self.assertIn("lapsed", str(out))
        self.assertEqual(ran, [])


class AsyncCancelTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.relay = Relay(self, self.server.url)
        self.agent = countersign.AsyncClient(self.relay.url, self.server.token)
        self.run_: countersign.Run = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        self.event_id = countersign.event_id_for(self.run_, PAY["id"])

    async def test_cancelling_the_task_in_its_long_poll_cancels_the_approval(self) -> None:
        task = asyncio.create_task(self.agent.review(self.run_, [PAY], wait=None))
        await asyncio.to_thread(self.relay.wait_for, long_poll)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        rec = await asyncio.to_thread(decided, self.server, self.event_id)
        self.assertEqual(rec["status"], "cancelled")
        self.assertEqual(rec["outcome"]["decided_by"], [AGENT_SUBJECT])

    async def test_a_cancel_before_the_first_answer_still_cancels_what_that_request_opened(self) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(self.agent.review(self.run_, [PAY], wait=None))
        self.relay.before = (lambda line: loop.call_soon_threadsafe(task.cancel)
                             if line.startswith("POST /v1/reviews ") else None)
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual((await asyncio.to_thread(decided, self.server, self.event_id))["status"], "cancelled")

    async def test_an_async_gated_tool_on_the_blocking_client_cancels_through_its_thread(self) -> None:
        ran: List[int] = []

        @gated(Client(self.relay.url, self.server.token), run=self.run_)
        async def send_payment(amount: int) -> str:
            ran.append(amount)
            return "sent"

        task = asyncio.create_task(send_payment.invoke(PAY))
        await asyncio.to_thread(self.relay.wait_for, long_poll)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual((await asyncio.to_thread(decided, self.server, self.event_id))["status"], "cancelled")
        self.assertEqual(ran, [])

    async def test_a_bounded_wait_that_runs_out_cancels_nothing(self) -> None:
        (r,) = await self.agent.review(self.run_, [PAY], wait=0.3)
        self.assertEqual(r.verdict, "pending")
        self.assertEqual((await self.agent.approval(r.event_id))[0]["status"], "pending")
        self.assertEqual(self.relay.count(lambda line: line.endswith("/cancel HTTP/1.1")), 0)

    async def test_cancel_and_closed(self) -> None:
        (r,) = await self.agent.review(self.run_, [PAY])
        rec = await self.agent.cancel(r.event_id, "no longer needed") or await asyncio.to_thread(
            decided, self.server, r.event_id)
        self.assertEqual(rec["status"], "cancelled")
        with self.assertRaises(Closed):
            await self.agent.cancel(r.event_id)


if __name__ == "__main__":
    unittest.main()
