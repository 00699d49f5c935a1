from countersign import Client, gated

client = Client()  # reads COUNTERSIGN_URL and COUNTERSIGN_TOKEN

@gated(client, run={"id": "run-1", "agent": "billing-bot", "requested_by": "carol"})
def payments_send(amount: float, currency: str, recipient: str) -> str:
    return f"sent {amount} {currency} to {recipient}"  # runs once, after approval

print(payments_send(amount=1250, currency="EUR", recipient="Globex GmbH"))
