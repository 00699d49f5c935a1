"""GET /v1/events: the event stream and decisions(), across a server restart."""

from __future__ import annotations

import unittest
from typing import Set

from .server import Server, client_for, visible


class DecisionStreamTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.agent = client_for(self.server, retry_for=60)
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}

    def call(self, call_id: str, amount: int) -> str:
        return visible(self.server, self.run_, {"id": call_id, "name": "send_payment", "arguments": {"amount": amount}})

    def test_events_carry_requests_and_outcomes(self) -> None:
        with self.agent.events() as events:
            event_id = self.call("c1", 1)
            ev = next(events)
            self.assertEqual(ev.kind, "requested")
            self.assertEqual(ev.data["event_id"], event_id)
            self.assertTrue(ev.id, "an event without an id cannot be resumed from")
            client_for(self.server, "alice").reject(event_id, "no")
            kinds = []
            for ev in events:
                kinds.append(ev.kind)
                if ev.kind == "decided":
                    break
            self.assertEqual(ev.data["event_id"], event_id)
            self.assertEqual(ev.data["status"], "rejected")
            self.assertEqual(events.last_event_id, ev.id)

    def test_decisions_are_not_lost_across_a_server_restart(self) -> None:
        live, missed, early = self.call("live", 1), self.call("missed", 2), self.call("early", 3)
        alice = client_for(self.server, "alice")
        alice.approve(early)  # decided before the stream opens: found by the first read
        waiting: Set[str] = {live, missed, early}
        with self.agent.decisions(watch=waiting) as decisions:
            d = next(decisions)
            self.assertEqual((d.event_id, d.status), (early, "approved"))
            waiting.discard(d.event_id)
            alice.edit(live, {"amount": 10})
            d = next(decisions)  # from the live stream
            self.assertEqual((d.event_id, d.status, d.arguments), (live, "approved", {"amount": 10}))
            waiting.discard(d.event_id)
            last_id = decisions.events.last_event_id
            self.assertTrue(last_id)
            self.server.kill()
            self.server.start()  # the stream is broken; the server will not replay what it misses
            client_for(self.server, "alice").reject(missed, "duplicate invoice")
            d = next(decisions)  # reconnects (Last-Event-ID), reads the watched approvals again
            self.assertEqual(decisions.events.connects, 2)
            self.assertEqual((d.event_id, d.status, d.reason), (missed, "rejected", "duplicate invoice"))
            self.assertEqual(d.agent, "billing-bot")
            self.assertEqual(d.tool_name, "send_payment")


if __name__ == "__main__":
    unittest.main()
