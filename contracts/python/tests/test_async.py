"""The asyncio client and async gated tools, against a real `countersign serve`."""

from __future__ import annotations

import asyncio
import unittest
from typing import List, Set

from countersign import AlreadyClaimed, CallDenied, Denied, NotApproved, ToolCall, gated, new_claim_id

from .server import Server, async_client_for, client_for


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.agent = async_client_for(self.server, retry_for=60)
        self.alice = async_client_for(self.server, "alice")
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}

    async def visible(self, call: ToolCall) -> str:
        (res,) = await self.agent.review(self.run_, [call])
        self.assertEqual(res.verdict, "pending")
        return res.event_id

    async def test_review_and_claim(self) -> None:
        results = await self.agent.review(self.run_, [
            {"id": "a", "name": "search_web", "arguments": {"q": "x"}},
            {"id": "b", "name": "send_payment", "arguments": {"amount": 1}},
        ])
        self.assertEqual([r.verdict for r in results], ["allowed", "pending"])
        event_id = results[1].event_id
        with self.assertRaises(NotApproved):
            await self.agent.claim(event_id, new_claim_id())
        await self.alice.approve(event_id)
        (res,) = await self.agent.review(self.run_, [{"id": "b", "name": "send_payment", "arguments": {"amount": 1}}],
                                         wait=30)
        self.assertEqual((res.verdict, res.arguments), ("allowed", {"amount": 1}))
        claim_id = new_claim_id()
        self.assertEqual((await self.agent.claim(event_id, claim_id))["claim"]["claim_id"], claim_id)
        self.assertEqual((await self.agent.claim(event_id, claim_id))["claim"]["claim_id"], claim_id)
        with self.assertRaises(AlreadyClaimed):
            await self.agent.claim(event_id, new_claim_id())

    async def test_async_tool_waits_and_runs_once_after_approval(self) -> None:
        sent: List[int] = []

        @gated(self.agent, run=self.run_)
        async def send_payment(amount: int, currency: str) -> str:
            sent.append(amount)
            return f"sent {amount} {currency}"

        task = asyncio.create_task(send_payment(amount=40, currency="EUR"))
        event_id = await self.visible(send_payment.tool_call(amount=40, currency="EUR"))
        self.assertFalse(task.done())
        self.assertEqual(sent, [])
        await self.alice.approve(event_id)
        self.assertEqual(await asyncio.wait_for(task, 60), "sent 40 EUR")
        again = await send_payment(amount=40, currency="EUR")
        self.assertIsInstance(again, Denied)
        self.assertEqual(sent, [40])

    async def test_async_tool_edit_and_rejection(self) -> None:
        sent: List[int] = []

        @gated(self.agent, run=self.run_, raise_on_deny=True)
        async def send_payment(amount: int) -> int:
            sent.append(amount)
            return amount

        edited = asyncio.create_task(send_payment.invoke({"id": "e", "type": "tool_use", "name": "send_payment",
                                                          "input": {"amount": 500}}))
        rejected = asyncio.create_task(send_payment.invoke({"id": "r", "type": "tool_use", "name": "send_payment",
                                                            "input": {"amount": 600}}))
        await self.alice.edit(await self.visible({"id": "e", "name": "send_payment", "arguments": {"amount": 500}}),
                              {"amount": 450})
        await self.alice.reject(await self.visible({"id": "r", "name": "send_payment",
                                                    "arguments": {"amount": 600}}), "over budget")
        self.assertEqual(await asyncio.wait_for(edited, 60), 450)
        with self.assertRaises(CallDenied) as cm:
            await asyncio.wait_for(rejected, 60)
        self.assertIn("over budget", cm.exception.reason)
        self.assertEqual(sent, [450])

    async def test_async_tool_with_the_blocking_client(self) -> None:
        @gated(client_for(self.server), run=self.run_)
        async def search_web(q: str) -> str:
            return "found " + q

        self.assertEqual(await search_web(q="x"), "found x")

    async def test_a_wait_can_be_cancelled(self) -> None:
        task = asyncio.create_task(self.agent.review(self.run_, [{"id": "c", "name": "send_payment",
                                                                  "arguments": {"amount": 1}}], wait=None))
        await self.visible({"id": "c", "name": "send_payment", "arguments": {"amount": 1}})
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task

    async def test_a_wait_survives_kill_9_and_restart(self) -> None:
        sent: List[int] = []

        @gated(self.agent, run=self.run_)
        async def send_payment(amount: int) -> str:
            sent.append(amount)
            return "sent"

        task = asyncio.create_task(send_payment(amount=3))
        event_id = await self.visible(send_payment.tool_call(amount=3))
        await asyncio.to_thread(self.server.kill)
        await asyncio.to_thread(self.server.start)
        await async_client_for(self.server, "alice").approve(event_id)
        self.assertEqual(await asyncio.wait_for(task, 60), "sent")
        self.assertEqual(sent, [3])

    async def test_decisions_across_a_server_restart(self) -> None:
        live = await self.visible({"id": "live", "name": "send_payment", "arguments": {"amount": 1}})
        missed = await self.visible({"id": "missed", "name": "send_payment", "arguments": {"amount": 2}})
        waiting: Set[str] = {live, missed}
        async with self.agent.decisions(watch=waiting) as decisions:
            await self.alice.approve(live)
            d = await asyncio.wait_for(decisions.__anext__(), 60)
            self.assertEqual((d.event_id, d.status), (live, "approved"))
            waiting.discard(live)
            self.assertTrue(decisions.events.last_event_id)
            await asyncio.to_thread(self.server.restart)
            await async_client_for(self.server, "alice").reject(missed, "no")
            d = await asyncio.wait_for(decisions.__anext__(), 60)
            self.assertEqual((d.event_id, d.status, d.reason), (missed, "rejected", "no"))
            self.assertEqual(decisions.events.connects, 2)

    async def test_events_stream(self) -> None:
        async with self.agent.events() as events:
            event_id = await self.visible({"id": "s", "name": "send_payment", "arguments": {"amount": 1}})
            ev = await asyncio.wait_for(events.__anext__(), 60)
            self.assertEqual((ev.kind, ev.data["event_id"]), ("requested", event_id))



if __name__ == "__main__":
    unittest.main()
