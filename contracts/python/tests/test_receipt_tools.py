"""Receipt-enforcing tools behind @gated, and the replay store that two replicas of a tool share, against a
real `countersign serve`."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import re
import threading
import unittest
import urllib.error
import urllib.request
from typing import Any, Dict, List, Tuple

import countersign
from countersign import ToolCall, gated
from countersign.receipts import (JWKSFetcher, MemoryReplayStore, ReceiptError, ReplayedReceipt, ReplayStore,
                                  ServerReplayStore, verify_receipt)

from .server import PYROOT, Server, approver_tokens, client_for, visible


class ReceiptTool:
    """An HTTP tool (one replica) that runs ``send_payment`` only with a valid, unused receipt for exactly the
    request body, as a tool behind the Python verifier does; refusals answer the receipt error's status and
    code."""

    def __init__(self, tc: unittest.TestCase, server: Server, replay: ReplayStore) -> None:
        self.ran: List[Dict[str, Any]] = []
        keys = JWKSFetcher(server.url + "/.well-known/jwks.json")
        tool = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    verify_receipt(self.headers.get("Countersign-Receipt"), "send_payment", body, keys=keys,
                                   replay=replay)
                except ReceiptError as e:
                    self._answer(e.status, {"error": {"code": e.code, "message": str(e)}})
                    return
                tool.ran.append(json.loads(body))
                self._answer(200, {"paid": True})

            def _answer(self, status: int, body: Dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/send_payment"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        tc.addCleanup(self._httpd.server_close)
        tc.addCleanup(self._httpd.shutdown)


def post(url: str, arguments: Dict[str, Any], headers: Dict[str, str]) -> Tuple[int, str]:
    """Posts the arguments; returns the status and the refusal's code ("" for none)."""
    req = urllib.request.Request(url, data=json.dumps(arguments).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]["code"]


class GatedReceiptTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.agent = client_for(self.server)
        self.alice = client_for(self.server, "alice")
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        self.tool = ReceiptTool(self, self.server, MemoryReplayStore())

    def approved(self, call: ToolCall) -> None:
        self.alice.approve(visible(self.server, self.run_, call))

    def test_a_sync_gated_tool_hands_the_receipt_to_a_verifying_tool(self) -> None:
        tool = self.tool

        @gated(self.agent, run=self.run_)
        def send_payment(amount: int, recipient: str) -> Tuple[int, str]:
            return post(tool.url, {"amount": amount, "recipient": recipient}, countersign.receipt_headers())

        call: ToolCall = {"id": "pay-1", "name": "send_payment", "arguments": {"amount": 12, "recipient": "Globex"}}
        self.approved(call)
        self.assertEqual(send_payment.invoke(call), (200, ""))
        self.assertEqual(tool.ran, [{"amount": 12, "recipient": "Globex"}])
        self.assertEqual(countersign.current_receipt(), "")  # only while the function runs
        self.assertEqual(post(tool.url, {"amount": 12, "recipient": "Globex"}, {}), (401, "receipt_missing"))

    def test_an_async_gated_tool_finds_its_receipt(self) -> None:
        tool = self.tool
        seen: List[str] = []

        @gated(countersign.AsyncClient(self.server.url, self.server.token), run=self.run_)
        async def send_payment(amount: int, recipient: str) -> Tuple[int, str]:
            seen.append(countersign.current_receipt())
            args = {"amount": amount, "recipient": recipient}
            return await asyncio.to_thread(post, tool.url, args, countersign.receipt_headers())

        call: ToolCall = {"id": "pay-2", "name": "send_payment", "arguments": {"amount": 3, "recipient": "ACME"}}
        self.approved(call)
        self.assertEqual(asyncio.run(send_payment.invoke(call)), (200, ""))
        self.assertEqual(tool.ran, [{"amount": 3, "recipient": "ACME"}])
        self.assertTrue(seen[0].count(".") == 2, seen)


class SharedReplayStoreTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server(self)
        self.run_ = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        self.token = approver_tokens()["alice"]

    def store(self) -> ServerReplayStore:
        return ServerReplayStore(self.server.url, self.token)

    def test_two_replicas_accept_a_receipt_once_between_them(self) -> None:
        a, b = ReceiptTool(self, self.server, self.store()), ReceiptTool(self, self.server, self.store())
        call: ToolCall = {"id": "pay-r", "name": "send_payment", "arguments": {"amount": 9, "recipient": "Initech"}}
        event_id = visible(self.server, self.run_, call)
        client_for(self.server, "alice").approve(event_id)
        rec = client_for(self.server).claim(event_id, countersign.new_claim_id())
        headers = {"Countersign-Receipt": rec["claim"]["receipt"]}
        args = call["arguments"]

        self.assertEqual(post(a.url, args, headers), (200, ""))
        self.assertEqual(post(b.url, args, headers), (409, "receipt_replayed"))
        self.assertEqual(post(a.url, args, headers), (409, "receipt_replayed"))
        restarted = ReceiptTool(self, self.server, self.store())  # a replica started afresh
        self.assertEqual(post(restarted.url, args, headers), (409, "receipt_replayed"))
        self.assertEqual(len(a.ran) + len(b.ran) + len(restarted.ran), 1)

    def test_the_store_itself(self) -> None:
        import time
        until = time.time() + 60
        self.store().use("rcpt-py-1", until)
        with self.assertRaises(ReplayedReceipt):
            self.store().use("rcpt-py-1", until)
        with self.assertRaises(ReceiptError) as cm:  # fails closed
            ServerReplayStore(self.server.url, "cs_not-a-token").use("rcpt-py-2", until)
        self.assertEqual(cm.exception.code, "receipt_unavailable")
        with self.assertRaises(ReceiptError):  # further ahead than any receipt lives
            self.store().use("rcpt-py-3", until + 3 * 3600)


class DocsBlockTest(unittest.TestCase):
    """The Python lines docs/receipts.md gives a tool, run as written (the issuer's address is this
    server's): they verify a receipt the claim returned, for exactly the approved arguments."""

    def block(self) -> str:
        with open(os.path.join(PYROOT, "..", "..", "docs", "receipts.md")) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        lines = [b for b in blocks if "verify_receipt(" in b]
        self.assertEqual(len(lines), 1, blocks)
        return lines[0]

    def test_the_docs_lines_verify_a_claimed_receipt(self) -> None:
        server = Server(self)
        run: countersign.Run = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        args = {"amount": 7, "recipient": "Globex"}
        event_id = visible(server, run, {"id": "pay-doc", "name": "payments.send", "arguments": args})
        client_for(server, "alice").approve(event_id)
        receipt = client_for(server).claim(event_id, countersign.new_claim_id())["claim"]["receipt"]
        code = self.block().replace("https://countersign.example.com", server.url)

        class Request:
            headers = {"Countersign-Receipt": receipt}

        scope: Dict[str, Any] = {"request": Request(), "arguments": args}
        exec(code, scope)
        self.assertEqual(scope["claims"]["event_id"], event_id)
        scope = {"request": Request(), "arguments": dict(args, amount=700)}
        with self.assertRaises(ReceiptError):
            exec(code, scope)


if __name__ == "__main__":
    unittest.main()
