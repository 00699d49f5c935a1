"""The client's pure parts: tool-call shapes, SSE parsing, errors, webhook signatures."""

from __future__ import annotations

import json
import unittest

from countersign import (AlreadyClaimed, InvalidToolCall, NotAnApprover, Refused, Unavailable, WebhookReceiver,
                         WebhookVerificationError, codes, parse_secret, sign, to_tool_call, verify_webhook)
from countersign._core import Backoff, SSEParser, review_body, settings, transient
from countersign.errors import api_error

# Standard Webhooks test vectors (libraries/go/webhook_test.go TestWebhookSign; libraries/rust test_sign).
V1 = dict(secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", id="msg_p5jXN8AQM9LWM0D4loKWxJek", ts=1614265330,
          body=b'{"test": 2432232314}', sig="v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
V2 = dict(secret="whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", id="msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", ts=1649367553,
          body=b'{"email":"test@example.com","username":"test_user"}',
          sig="v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=")


def hdrs(v: dict, sig: str) -> dict:
    return {"Webhook-Id": v["id"], "Webhook-Timestamp": str(v["ts"]), "Webhook-Signature": sig}


class ToolCallShapesTest(unittest.TestCase):
    def test_openai_chat_completions(self) -> None:
        tc = to_tool_call({"id": "call_abc", "type": "function",
                           "function": {"name": "send_payment", "arguments": '{"amount": 5}'}})
        self.assertEqual(tc, {"id": "call_abc", "name": "send_payment", "arguments": {"amount": 5}})

    def test_openai_responses(self) -> None:
        tc = to_tool_call({"type": "function_call", "id": "fc_1", "call_id": "call_x", "name": "f",
                           "arguments": ""})
        self.assertEqual(tc, {"id": "call_x", "name": "f", "arguments": {}})

    def test_anthropic_tool_use(self) -> None:
        tc = to_tool_call({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1]}})
        self.assertEqual(tc, {"id": "toolu_1", "name": "f", "arguments": {"a": [1]}})

    def test_sdk_objects_with_model_dump(self) -> None:
        class Block:
            def model_dump(self) -> dict:
                return {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}}

        self.assertEqual(to_tool_call(Block()), {"id": "toolu_2", "name": "g", "arguments": {}})

    def test_countersign_shape_keeps_the_schema(self) -> None:
        tc = to_tool_call({"name": "f", "arguments": {"x": 1}, "tool_schema": {"type": "object"}})
        self.assertEqual(tc, {"name": "f", "arguments": {"x": 1}, "tool_schema": {"type": "object"}})

    def test_bad_calls_name_the_field(self) -> None:
        cases = [
            ({"type": "function", "function": {"name": "f", "arguments": "{not json"}}, "function.arguments"),
            ({"type": "function", "function": {"name": "f", "arguments": "[1]"}}, "function.arguments"),
            ({"type": "tool_use", "id": "t", "name": "", "input": {}}, "name"),
            ({"type": "image", "id": "t"}, "type"),
            ({"name": "f", "id": 7}, "id"),
        ]
        for call, field in cases:
            with self.subTest(call=call), self.assertRaises(InvalidToolCall) as cm:
                to_tool_call(call)
            self.assertEqual((cm.exception.code, cm.exception.field), (codes.INVALID_TOOL_CALL, field))


class ReviewBodyTest(unittest.TestCase):
    def test_a_waiting_review_gives_missing_ids_of_its_own(self) -> None:
        # A review that polls sends the same body again; without ids every
        # request would open approvals of its own.
        body, _ = review_body({"agent": "a"}, [{"name": "t"}, {"id": "given", "name": "u"}], with_ids=True)
        sent = json.loads(body)
        self.assertTrue(sent["run"]["id"])
        self.assertTrue(sent["tool_calls"][0]["id"])
        self.assertEqual(sent["tool_calls"][1]["id"], "given")
        again, _ = review_body({"agent": "a", "id": "r"}, [{"id": "c", "name": "t"}], with_ids=True)
        self.assertEqual((json.loads(again)["run"]["id"], json.loads(again)["tool_calls"][0]["id"]), ("r", "c"))

    def test_a_review_that_does_not_wait_sends_ids_as_given(self) -> None:
        body, _ = review_body({"agent": "a"}, [{"name": "t"}])
        sent = json.loads(body)
        self.assertNotIn("id", sent["run"])
        self.assertNotIn("id", sent["tool_calls"][0])


class SSEParserTest(unittest.TestCase):
    def test_events_ids_comments_and_retry(self) -> None:
        p = SSEParser()
        stream = (": countersign events\n\nretry: 1500\nevent: decided\nid: HITL_EVENTS:7\n"
                  'data: {"event_id":\ndata: "e1"}\n\n: heartbeat\n\ndata:plain\r\n\r\n')
        events = [e for line in stream.splitlines(keepends=True) if (e := p.feed(line)) is not None]
        self.assertEqual([(e.kind, e.id, e.data) for e in events],
                         [("decided", "HITL_EVENTS:7", {"event_id": "e1"}), ("message", "HITL_EVENTS:7", "plain")])
        self.assertEqual(p.last_event_id, "HITL_EVENTS:7")
        self.assertEqual(p.retry, 1.5)


class ErrorsTest(unittest.TestCase):
    def test_codes_map_to_classes(self) -> None:
        e = api_error(409, "already_claimed", "m", None)
        self.assertIsInstance(e, AlreadyClaimed)
        self.assertIsInstance(e, Refused)
        self.assertIsInstance(api_error(403, "not_an_approver", "", None), NotAnApprover)
        self.assertIs(type(api_error(409, "some_new_refusal", "", None)), Refused)
        self.assertIsInstance(api_error(503, "unavailable", "", None), Unavailable)

    def test_only_transient_failures_are_retried(self) -> None:
        for status, code, want in [(503, "unavailable", True), (502, "http_502", True), (504, "x", True),
                                   (409, "already_claimed", False), (400, "invalid_field", False),
                                   (500, "internal", False)]:
            self.assertEqual(transient(api_error(status, code, "", None)), want, (status, code))


class WebhookTest(unittest.TestCase):
    def test_official_vectors_sign_and_verify(self) -> None:
        for v in (V1, V2):
            with self.subTest(id=v["id"]):
                self.assertEqual(sign(v["secret"], v["id"], v["ts"], v["body"]), v["sig"])
                payload = verify_webhook(v["secret"], hdrs(v, v["sig"]), v["body"], now=v["ts"])
                self.assertEqual(payload, json.loads(v["body"]))

    def test_wrong_partial_and_foreign_signatures_fail(self) -> None:
        for sig in ("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", "v1,",
                    "v1,R3PTzyfHASBKHH98a7yexTwaJ4yNIcGhFQc1yuN+BPU=", "v2," + V1["sig"][3:], V1["sig"][3:]):
            with self.subTest(sig=sig), self.assertRaises(WebhookVerificationError) as cm:
                verify_webhook(V1["secret"], hdrs(V1, sig), V1["body"], now=V1["ts"])
            self.assertEqual(cm.exception.code, codes.NO_MATCHING_SIGNATURE)
        with self.assertRaises(WebhookVerificationError):  # a changed body
            verify_webhook(V1["secret"], hdrs(V1, V1["sig"]), b'{"test": 2432232315}', now=V1["ts"])

    def test_any_listed_signature_and_any_secret_may_match(self) -> None:
        other = "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB"
        sigs = "v1a,ignored v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + V1["sig"]
        verify_webhook([other, V1["secret"]], hdrs(V1, sigs), V1["body"], now=V1["ts"])

    def test_timestamp_tolerance(self) -> None:
        h = hdrs(V1, V1["sig"])
        verify_webhook(V1["secret"], h, V1["body"], now=V1["ts"] + 300)
        verify_webhook(V1["secret"], h, V1["body"], now=V1["ts"] - 300)
        for now, code in ((V1["ts"] + 301, codes.TOO_OLD), (V1["ts"] - 301, codes.TOO_NEW)):
            with self.assertRaises(WebhookVerificationError) as cm:
                verify_webhook(V1["secret"], h, V1["body"], now=now)
            self.assertEqual(cm.exception.code, code)
        for ts in ("-1614265330", "1614265330.0", "abc"):
            with self.assertRaises(WebhookVerificationError) as cm:
                verify_webhook(V1["secret"], dict(h, **{"Webhook-Timestamp": ts}), V1["body"], now=V1["ts"])
            self.assertEqual(cm.exception.code, codes.BAD_TIMESTAMP)
        with self.assertRaises(WebhookVerificationError) as cm:
            verify_webhook(V1["secret"], {"webhook-id": V1["id"]}, V1["body"], now=V1["ts"])
        self.assertEqual(cm.exception.code, codes.MISSING_HEADERS)

    def test_secrets_are_checked_and_never_quoted(self) -> None:
        for bad in ("whsec_", "whsec_not base64!", "whsec_" + "QUFB"):
            with self.subTest(bad=bad), self.assertRaises(WebhookVerificationError) as cm:
                parse_secret(bad)
            self.assertEqual(cm.exception.code, codes.INVALID_SECRET)
            self.assertNotIn(bad[6:] or "\0", str(cm.exception))
        self.assertEqual(len(parse_secret(V1["secret"])), 24)

    def test_receiver_hands_decisions_over_once(self) -> None:
        decided = {"spec": "countersign.approval.decided/v1", "event_id": "e1", "status": "approved",
                   "agent": "bot", "outcome": {"decision": "approve", "arguments": {"a": 1}}}
        body = json.dumps(decided).encode()
        got = []
        r = WebhookReceiver(V1["secret"], on_decision=got.append)
        h = {"webhook-id": "n1", "webhook-timestamp": str(V1["ts"]),
             "webhook-signature": sign(V1["secret"], "n1", V1["ts"], body), "countersign-kind": "decided"}
        self.assertEqual(r.handle(h, body, now=V1["ts"]), 204)
        self.assertEqual(r.handle(h, body, now=V1["ts"]), 204)  # delivered again: dropped
        self.assertEqual([(d.event_id, d.approved, d.arguments) for d in got], [("e1", True, {"a": 1})])
        self.assertEqual(r.handle(dict(h, **{"webhook-id": "n2"}), body, now=V1["ts"]), 401)


class BackoffTest(unittest.TestCase):
    def test_a_single_call_retries_for_retry_for_from_its_first_failure(self) -> None:
        import time
        s = settings("http://127.0.0.1:1", "t", retry_for=0.05, min_backoff=0.001, max_backoff=0.002, timeout=1)
        b = Backoff(s)
        time.sleep(0.06)  # a long request before the first failure does not use up the window
        self.assertIsNotNone(b.next())
        time.sleep(0.06)
        self.assertIsNone(b.next())

    def test_a_wait_retries_until_its_own_bound(self) -> None:
        import time
        s = settings("http://127.0.0.1:1", "t", retry_for=0.01, min_backoff=0.001, max_backoff=0.002, timeout=1)
        forever = Backoff(s, None, persist=True)
        bounded = Backoff(s, time.monotonic() + 0.05, persist=True)
        time.sleep(0.03)
        self.assertIsNotNone(forever.next())
        self.assertIsNotNone(bounded.next())
        time.sleep(0.03)
        self.assertIsNotNone(forever.next())
        self.assertIsNone(bounded.next())

    def test_poll_wait_is_checked(self) -> None:
        with self.assertRaisesRegex(ValueError, "poll_wait"):
            settings("http://127.0.0.1:1", "t", 1, 0.1, 1, 1, poll_wait=61)


if __name__ == "__main__":
    unittest.main()


class OverBudgetTest(unittest.TestCase):
    def test_429_is_too_many_requests_with_retry_after(self) -> None:
        from countersign import TooManyRequests, codes
        from countersign._core import decode_answer
        for code in (codes.RATE_LIMITED, codes.TOO_MANY_STREAMS, codes.PENDING_QUOTA, codes.TOO_MANY_CONNECTIONS):
            body = json.dumps({"error": {"code": code, "message": "over", "retry_after": 7}}).encode()
            with self.assertRaises(TooManyRequests) as cm:
                decode_answer(429, body)
            self.assertEqual(cm.exception.code, code)
            self.assertEqual(cm.exception.status, 429)
            self.assertEqual(cm.exception.retry_after, 7.0)
            self.assertFalse(transient(cm.exception))
