"""The client's calls, errors and retries, against a real `countersign serve`."""

from __future__ import annotations

import concurrent.futures
import socket
import time
import unittest

import countersign
from countersign import (AlreadyClaimed, Client, CountersignError, InvalidRequest, NetworkError, NotAnApprover,
                         NotApproved, SelfApproval, ToolCall, Unauthenticated, codes, gated, new_claim_id)

from .relay import Relay
from .server import Server, client_for, visible


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.agent = client_for(self.server)
        self.alice = client_for(self.server, "alice")
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        self.pool = concurrent.futures.ThreadPoolExecutor(2)
        self.addCleanup(self.pool.shutdown)

    def pending(self, call_id: str = "c1") -> str:
        return visible(self.server, self.run_, {"id": call_id, "name": "send_payment", "arguments": {"amount": 10}})

    def test_review_answers_each_call(self) -> None:
        results = self.agent.review(self.run_, [
            {"id": "a", "name": "search_web", "arguments": {"q": "x"}},
            {"id": "b", "name": "shell_exec", "arguments": {}},
            {"id": "c", "name": "send_payment", "arguments": {"amount": 1}},
        ])
        self.assertEqual([r.verdict for r in results], ["allowed", "denied", "pending"])
        self.assertEqual(results[0].arguments, {"q": "x"})
        self.assertEqual(results[2].event_id, countersign.event_id_for(self.run_, "c"))
        self.assertFalse(results[2].terminal)

    def test_a_waiting_batch_hands_over_allowed_calls_at_once(self) -> None:
        seen: list = []
        allowed_seen = concurrent.futures.Future()  # type: concurrent.futures.Future[None]

        def on_result(i: int, r: countersign.Result) -> None:
            seen.append(f"{i}:{r.verdict}")
            if i == 0 and not allowed_seen.done():
                allowed_seen.set_result(None)

        calls = [{"id": "look", "name": "search_web", "arguments": {"q": "x"}},
                 {"id": "pay", "name": "send_payment", "arguments": {"amount": 3}}]
        done = self.pool.submit(self.agent.review, self.run_, calls, wait=None, on_result=on_result)
        allowed_seen.result(timeout=30)  # handed over while the payment waits
        self.assertEqual(seen, ["0:allowed"])
        pending = self.agent.review(self.run_, calls[1:])[0]
        self.assertEqual(pending.verdict, "pending")
        self.alice.approve(pending.event_id)
        results = done.result(timeout=60)
        self.assertEqual([r.verdict for r in results], ["allowed", "allowed"])
        self.assertEqual(seen, ["0:allowed", "1:allowed"])

    def test_claim_retried_with_the_same_id_succeeds_and_another_id_is_refused(self) -> None:
        event_id = self.pending()
        claim_id = new_claim_id()
        with self.assertRaises(NotApproved) as cm:
            self.agent.claim(event_id, claim_id)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, codes.NOT_APPROVED))
        self.alice.approve(event_id)
        rec = self.agent.claim(event_id, claim_id)
        self.assertEqual(rec["claim"]["claim_id"], claim_id)
        again = self.agent.claim(event_id, claim_id)  # the answer was lost: retry with the same id
        self.assertEqual(again["claim"]["claim_id"], claim_id)
        with self.assertRaises(AlreadyClaimed) as cm2:
            self.agent.claim(event_id, new_claim_id())
        self.assertEqual(cm2.exception.code, codes.ALREADY_CLAIMED)
        self.assertIsInstance(cm2.exception, countersign.Refused)

    def test_refused_votes_raise_their_refusal(self) -> None:
        event_id = self.pending()
        with self.assertRaises(NotAnApprover) as cm:
            client_for(self.server, "carol").approve(event_id)
        self.assertEqual((cm.exception.status, cm.exception.code), (403, codes.NOT_AN_APPROVER))
        own = {"id": self.id() + "-own", "agent": "billing-bot", "requested_by": "alice"}
        (res,) = self.agent.review(own, [{"id": "c1", "name": "send_payment", "arguments": {"amount": 1}}])
        with self.assertRaises(SelfApproval) as cm2:
            self.alice.approve(res.event_id)
        self.assertEqual(cm2.exception.code, codes.SELF_APPROVAL)

    def test_bad_requests_name_the_field(self) -> None:
        with self.assertRaises(InvalidRequest) as cm:
            self.agent.review({"id": "r", "agent": ""}, [{"name": "search_web"}])
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.field),
                         (400, codes.INVALID_FIELD, "run.agent"))
        with self.assertRaises(InvalidRequest) as cm2:
            self.agent.review({"agent": "a", "colour": "red"}, [{"name": "search_web"}])  # type: ignore[typeddict-unknown-key]
        self.assertEqual(cm2.exception.code, codes.UNKNOWN_FIELD)
        with self.assertRaises(Unauthenticated) as cm3:
            Client(self.server.url, "cs_not-a-token").review(self.run_, [{"name": "search_web"}])
        self.assertEqual((cm3.exception.status, cm3.exception.code), (401, codes.UNAUTHENTICATED))

    def test_arguments_changed_under_the_same_ids_is_refused(self) -> None:
        self.pending("same")
        with self.assertRaises(countersign.ArgumentsChanged) as cm:
            self.agent.review(self.run_, [{"id": "same", "name": "send_payment", "arguments": {"amount": 99}}])
        self.assertEqual((cm.exception.status, cm.exception.code), (409, codes.ARGUMENTS_CHANGED))

    def test_ask_waits_for_the_answer(self) -> None:
        fut = self.pool.submit(self.agent.ask, self.run_, {"text": "Which account?", "schema": {
            "type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]}}, id="q1")
        (pending,) = [self.agent.ask(self.run_, {"text": "Which account?", "schema": {
            "type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]}},
            id="q1", wait=0)]
        self.assertEqual(pending.status, "pending")
        self.alice.vote(pending.event_id, "answer", answer={"action": "accept", "content": {"account": "DE89"}})
        ans = fut.result(timeout=60)
        self.assertEqual((ans.status, ans.action, ans.content), ("answered", "accept", {"account": "DE89"}))
        self.assertEqual(ans.answered_by, "alice")

    def test_a_wait_survives_kill_9_and_restart_of_the_server(self) -> None:
        ran = []
        agent = client_for(self.server, retry_for=60)

        @gated(agent, run=self.run_)
        def send_payment(amount: int) -> str:
            ran.append(amount)
            return "sent"

        call: ToolCall = {"id": "c-restart", "name": "send_payment", "arguments": {"amount": 5}}
        fut = self.pool.submit(send_payment.invoke, call)
        event_id = visible(self.server, self.run_, call)
        self.assertFalse(fut.done())
        self.server.kill()  # the waiting request's connection breaks; new ones are refused
        self.assertFalse(fut.done())
        self.server.start()  # same data directory and port
        client_for(self.server, "alice").approve(event_id)
        self.assertEqual(fut.result(timeout=60), "sent")
        self.assertEqual(ran, [5])

    def test_a_wait_survives_a_restart_late_in_its_poll(self) -> None:
        # The retry window (retry_for, 0.3 s) is long over when the server dies 1 s into a 5 s poll, and the
        # server is away for longer than that: the wait goes on regardless, and the approval decided after
        # the restart runs the tool once.
        relay = Relay(self, self.server.url)
        agent = countersign.Client(relay.url, self.server.token, retry_for=0.3, min_backoff=0.02, max_backoff=0.2,
                                   poll_wait=5)
        ran = []

        @gated(agent, run=self.run_)
        def send_payment(amount: int) -> str:
            ran.append(amount)
            return "sent"

        call: ToolCall = {"id": "c-late", "name": "send_payment", "arguments": {"amount": 7}}
        fut = self.pool.submit(send_payment.invoke, call)
        relay.wait_for(lambda line: line.startswith("POST /v1/reviews?wait=5000ms"))
        started = time.monotonic()
        time.sleep(max(0.0, started + 1.0 - time.monotonic()))  # late in the poll: only time can say so
        self.server.kill()
        self.assertFalse(fut.done())
        self.server.start()  # same data directory and port
        event_id = visible(self.server, self.run_, call)
        client_for(self.server, "alice").approve(event_id)
        self.assertEqual(fut.result(timeout=60), "sent")
        self.assertEqual(ran, [7])
        self.assertIsInstance(send_payment.invoke(call), countersign.Denied)  # already executed
        self.assertEqual(ran, [7])

    def test_claim_across_a_restart_keeps_its_id(self) -> None:
        event_id = self.pending()
        self.alice.approve(event_id)
        claim_id = new_claim_id()
        self.agent.claim(event_id, claim_id)
        self.server.restart()
        self.assertEqual(self.agent.claim(event_id, claim_id)["claim"]["claim_id"], claim_id)
        with self.assertRaises(AlreadyClaimed):
            self.agent.claim(event_id, new_claim_id())


class UnreachableTest(unittest.TestCase):
    def test_connection_refused_is_retried_for_retry_for_then_raised(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        c = Client(f"http://127.0.0.1:{port}", "cs_x", retry_for=0.4, min_backoff=0.05, max_backoff=0.1)
        start = time.monotonic()
        with self.assertRaises(NetworkError) as cm:
            c.review({"agent": "a"}, [{"name": "search_web"}])
        self.assertGreaterEqual(time.monotonic() - start, 0.4)
        self.assertEqual(cm.exception.code, codes.UNREACHABLE)
        self.assertIsInstance(cm.exception, CountersignError)

    def test_configuration_errors_name_the_setting(self) -> None:
        with self.assertRaisesRegex(ValueError, "url"):
            Client("ftp://x", "t")
        with self.assertRaisesRegex(ValueError, "token"):
            Client("http://127.0.0.1:1", "")
        with self.assertRaisesRegex(ValueError, "min_backoff"):
            Client("http://127.0.0.1:1", "t", min_backoff=3, max_backoff=1)


if __name__ == "__main__":
    unittest.main()
