"""Countersign's webhooks, sent by the real notifier, received and verified here."""

from __future__ import annotations

import base64
import http.server
import os
import queue
import threading
import unittest

from countersign import Decision, Webhook, WebhookReceiver, new_claim_id

from .server import Server, client_for, visible


class WebhookEndToEndTest(unittest.TestCase):
    def test_a_decision_arrives_signed_and_resumes_the_run(self) -> None:
        secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
        decisions: "queue.Queue[Decision]" = queue.Queue()
        kinds: "queue.Queue[str]" = queue.Queue()

        def on_webhook(w: Webhook) -> None:
            kinds.put(w.kind)

        receiver = WebhookReceiver(secret, on_decision=decisions.put, on_webhook=on_webhook)
        answers: "queue.Queue[int]" = queue.Queue()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = receiver.handle(self.headers, body)
                answers.put(status)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        self.addCleanup(httpd.server_close)
        self.addCleanup(httpd.shutdown)
        url = f"http://127.0.0.1:{httpd.server_address[1]}/countersign"
        server = Server(self, webhooks=[{"name": "agent", "url": url, "secret": secret}])
        run = {"id": self.id(), "agent": "billing-bot", "requested_by": "carol"}
        call = {"id": "c1", "name": "send_payment", "arguments": {"amount": 80}}
        event_id = visible(server, run, call)  # the run suspends here; the webhook resumes it
        self.assertEqual(kinds.get(timeout=60), "requested")
        self.assertEqual(answers.get(timeout=60), 204)
        client_for(server, "alice").edit(event_id, {"amount": 75}, "rounded")

        d = decisions.get(timeout=60)
        self.assertEqual((d.event_id, d.status, d.arguments), (event_id, "approved", {"amount": 75}))
        # Resume: claim, then run with the approved arguments.
        agent = client_for(server)
        rec = agent.claim(d.event_id, new_claim_id())
        self.assertEqual(rec["outcome"]["arguments"], {"amount": 75})


if __name__ == "__main__":
    unittest.main()
