"""An agent process that waits for a decision with the blocking client until
it is interrupted (the test sends SIGINT): a process that exits while it
waits leaves its approval pending."""

import os

from countersign import Client

# Short long-polls: a signal that lands just before the process blocks on
# its socket is acted on when the poll returns (CPython checks signals
# between blocking calls), so the test's wait for the exit must outlast one.
client = Client(poll_wait=1)
run = {"id": os.environ["RUN_ID"], "agent": "billing-bot", "requested_by": "carol"}
call = {"id": "pay-proc", "name": "send_payment", "arguments": {"amount": 9}}
client.review(run, [call])  # the approval exists
print("waiting", flush=True)
client.review(run, [call], wait=None)
