"""Countersign's Python client: durable human approval for AI agent tool calls.

Gate a tool function::

    from countersign import Client, gated

    client = Client()  # COUNTERSIGN_URL and COUNTERSIGN_TOKEN

    @gated(client, run={"id": "run-1", "agent": "billing-bot"})
    def send_payment(amount: float, currency: str, recipient: str) -> str: ...

or do each step yourself: :meth:`Client.review` (and wait), :meth:`Client.claim`
right before running, :meth:`Client.ask` a human, :meth:`Client.decisions` to
follow outcomes, :func:`verify_webhook` to receive them as webhooks.
:class:`AsyncClient` is the asyncio form. Standard library only.
"""

from .aio import AsyncClient, AsyncDecisionStream, AsyncEventStream
from .client import Abort, Client, DecisionStream, EventStream
from .errors import (Aborted, AlreadyClaimed, ApprovalLapsed, ArgumentsChanged, Closed, CountersignError,
                     DeadlineNotLater, DecisionNotAllowed, DuplicateVote, Forbidden, InFlight, InvalidRequest,
                     InvalidToolCall, NetworkError, NotAnApprover, NotApproved, NotClaimed, NotFound, NotPermitted,
                     OutcomeReported, OutOfOrder,
                     Refused, SelfApproval, StaleArguments, TooManyRequests, Unauthenticated, Unavailable,
                     UnknownApprover, WebhookVerificationError, codes)
from .gated import AsyncGatedTool, CallDenied, Denied, GatedTool, current_receipt, gated, receipt_headers
from .ids import event_id_for, new_claim_id, new_report_id, new_vote_id
from .receipts import (ApproversFetcher, Humans, JWKSFetcher, KeySet, MemoryReplayStore, ReceiptError,
                       ServerReplayStore, arguments_sha256, inspect_receipt, parse_approvers, verify_receipt)
from .toolcalls import ToolCallLike, to_tool_call
from .types import Answer, Decision, Event, Outcome, Question, Record, Result, Run, Status, ToolCall, Verdict, VoteDecision
from .webhooks import Webhook, WebhookReceiver, parse_secret, sign, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "Abort", "Aborted", "ApprovalLapsed", "DeadlineNotLater", "NotPermitted", "UnknownApprover",
    "AlreadyClaimed", "Answer", "ArgumentsChanged", "AsyncClient", "AsyncDecisionStream", "AsyncEventStream",
    "AsyncGatedTool", "CallDenied", "Client", "Closed", "CountersignError", "Decision", "DecisionNotAllowed",
    "DecisionStream", "Denied", "DuplicateVote", "Event", "EventStream", "Forbidden", "GatedTool", "InFlight",
    "InvalidRequest", "InvalidToolCall", "NetworkError", "NotAnApprover", "NotApproved", "NotFound", "OutOfOrder",
    "Question", "Record", "Refused", "Result", "Run", "SelfApproval", "StaleArguments", "Status", "TooManyRequests",
    "ToolCall",
    "ToolCallLike", "Unauthenticated", "Unavailable", "Verdict", "VoteDecision", "Webhook", "WebhookReceiver",
    "WebhookVerificationError", "codes", "event_id_for", "gated", "new_claim_id", "new_vote_id", "parse_secret",
    "sign", "to_tool_call", "verify_webhook",
    "JWKSFetcher", "KeySet", "MemoryReplayStore", "ReceiptError", "ServerReplayStore", "arguments_sha256",
    "inspect_receipt", "verify_receipt", "current_receipt", "receipt_headers",
    "ApproversFetcher", "Humans", "parse_approvers",
    "NotClaimed", "OutcomeReported", "Outcome", "new_report_id",
]
