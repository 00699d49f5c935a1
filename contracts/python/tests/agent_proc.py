"""An agent process for the crash test: `crash` dies inside the approved tool
(after its claim), `rerun` runs the same step again and prints the outcome."""

import json
import os
import sys

from countersign import Client, Denied, gated

mode = sys.argv[1]
client = Client()


@gated(client, run={"id": os.environ["RUN_ID"], "agent": "billing-bot", "requested_by": "carol"})
def send_payment(amount: float, currency: str, recipient: str) -> str:
    with open(os.environ["MARKER"], "a") as f:
        f.write("started\n" if mode == "crash" else "ran again\n")
    if mode == "crash":
        os._exit(17)  # the process dies before the payment is confirmed
    return "sent"


out = send_payment.invoke({"id": "call-crash", "type": "tool_use", "name": "send_payment",
                           "input": {"amount": 700, "currency": "EUR", "recipient": "Hooli"}})
print(json.dumps({"verdict": out.verdict, "reason": str(out)} if isinstance(out, Denied) else {"result": out}))
