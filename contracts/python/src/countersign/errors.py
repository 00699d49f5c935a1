"""Errors of the Countersign client.

Every answer of the API other than 2xx is a :class:`CountersignError` that
carries the HTTP ``status`` and the API's stable ``code``, ``message`` and
``field``. Branch on the subclass (``except AlreadyClaimed``) or on the code
(``err.code == codes.ALREADY_CLAIMED``), never on the message text.
"""

from __future__ import annotations

from typing import Dict, Optional, Type


class codes:
    """The stable error and refusal codes of the API (DESIGN §5, §7)."""

    # Refusals recorded by the arbiter (votes and commands).
    NOT_AN_APPROVER = "not_an_approver"
    SELF_APPROVAL = "self_approval"
    DUPLICATE_VOTE = "duplicate_vote"
    CLOSED = "closed"
    STALE_ARGUMENTS = "stale_arguments"
    INVALID_ARGUMENTS = "invalid_arguments"
    DECISION_NOT_ALLOWED = "decision_not_allowed"
    UNKNOWN_EVENT = "unknown_event"
    OUT_OF_ORDER = "out_of_order"
    ALREADY_CLAIMED = "already_claimed"
    NOT_APPROVED = "not_approved"
    APPROVAL_LAPSED = "approval_lapsed"
    """A claim more than the rule's ``claim_within`` after the decision: the call needs a new decision."""
    NOT_PERMITTED = "not_permitted"
    """A claim or command from a token that may not give it."""
    UNKNOWN_APPROVER = "unknown_approver"
    """A vote or command from someone the live directory does not list."""
    DEADLINE_NOT_LATER = "deadline_not_later"
    """An extend that would not move the deadline later."""
    NOT_CLAIMED = "not_claimed"
    """An outcome report for an approval nobody claimed."""
    OUTCOME_REPORTED = "outcome_reported"
    """An outcome report after another report (another command id) of the same call."""
    # Errors of the HTTP API.
    ARGUMENTS_CHANGED = "arguments_changed"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    INVALID_JSON = "invalid_json"
    UNKNOWN_FIELD = "unknown_field"
    BODY_TOO_LARGE = "body_too_large"
    INVALID_FIELD = "invalid_field"
    INVALID_PARAMETER = "invalid_parameter"
    INVALID_SCHEMA = "invalid_schema"
    INVALID_EVENT_ID = "invalid_event_id"
    APPROVER_NOT_ALLOWED = "approver_not_allowed"
    UNAVAILABLE = "unavailable"
    NOT_READY = "not_ready"
    # Over a budget (429, with Retry-After): see TooManyRequests.
    RATE_LIMITED = "rate_limited"
    """The token made requests of this kind faster than its rate."""
    TOO_MANY_STREAMS = "too_many_streams"
    """The token holds its most live event streams."""
    PENDING_QUOTA = "pending_quota"
    """The review would pass the agent's or the tenant's most pending approvals."""
    TOO_MANY_CONNECTIONS = "too_many_connections"
    """The server, or this client's address, holds its most connections."""
    # Codes of this client (no API answer behind them).
    UNREACHABLE = "unreachable"
    IN_FLIGHT = "in_flight"
    ABORTED = "aborted"
    INVALID_TOOL_CALL = "invalid_tool_call"
    BAD_ANSWER = "bad_answer"
    # Webhook verification.
    INVALID_SECRET = "invalid_secret"
    MISSING_HEADERS = "missing_headers"
    BAD_TIMESTAMP = "bad_timestamp"
    TOO_OLD = "too_old"
    TOO_NEW = "too_new"
    NO_MATCHING_SIGNATURE = "no_matching_signature"


class CountersignError(Exception):
    """An error of the API or of this client.

    ``status`` is the HTTP status of the API's answer (0 when there was none:
    the network failed, or the client refused the input itself); ``code`` is
    stable and machine-readable; ``field`` names the request field at fault.
    """

    def __init__(self, code: str, message: str = "", *, status: int = 0, field: Optional[str] = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        s = f"countersign: {self.code}"
        if self.status:
            s += f" ({self.status})"
        if self.message:
            s += f": {self.message}"
        if self.field:
            s += f" [field {self.field}]"
        return s

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, field={self.field!r})"


class Refused(CountersignError):
    """The arbiter refused a vote or a command (403 or 409 with a reason code)."""


class AlreadyClaimed(Refused):
    """The approval was claimed already, under another claim id: do not run the tool."""


class NotApproved(Refused):
    """A claim on an approval that is not approved (pending, rejected, expired...)."""


class ApprovalLapsed(Refused):
    """The approval was not claimed within its rule's ``claim_within`` of the decision (409): it lapsed,
    the call was not run, and it needs a new decision (propose it again under a new tool call id)."""


class NotPermitted(Refused):
    """This token may not give the command: only the agent that submitted a request (or an admin)
    claims it; its agent, approvers and admins may cancel it (403)."""


class UnknownApprover(Refused):
    """The voter or issuer is not (or no longer) in the live directory."""


class DeadlineNotLater(Refused):
    """An extend would not move the deadline later."""


class NotClaimed(Refused):
    """An outcome report for an approval that nobody claimed."""


class OutcomeReported(Refused):
    """An outcome report after another one: each claimed call's outcome is reported once."""


class NotAnApprover(Refused):
    """The voter is not among the request's approvers."""


class SelfApproval(Refused):
    """The requester or owner may not approve their own request."""


class DuplicateVote(Refused):
    """This approver has voted already; a vote cannot be changed."""


class Closed(Refused):
    """The approval is decided already."""


class StaleArguments(Refused):
    """The vote was cast on arguments that are no longer the ones under review."""


class DecisionNotAllowed(Refused):
    """The rule does not allow this decision (e.g. edit)."""


class OutOfOrder(Refused):
    """An ordered chain of approvers: this approver's turn has not come."""


class InvalidRequest(CountersignError):
    """The API refused the request as malformed (400 or 413); ``field`` says where."""


class ArgumentsChanged(CountersignError):
    """The run and tool call ids were reviewed before with other arguments (409)."""


class Unauthenticated(CountersignError):
    """The token is missing, unknown or expired (401)."""


class Forbidden(CountersignError):
    """The token's roles do not allow this request (403)."""


class NotFound(CountersignError):
    """No such approval or path (404)."""


class TooManyRequests(CountersignError):
    """Over a budget of the token or its address (429): ``retry_after`` is the seconds to wait
    before sending again (from Retry-After); the request was not carried out."""

    def __init__(self, code: str, message: str = "", *, status: int = 429, field: Optional[str] = None,
                 retry_after: Optional[float] = None) -> None:
        self.retry_after = retry_after
        super().__init__(code, message, status=status, field=field)

    def __str__(self) -> str:
        s = super().__str__()
        if self.retry_after:
            s += f" (retry after {self.retry_after:g} s)"
        return s


class Unavailable(CountersignError):
    """The API or its NATS server is unavailable (502, 503, 504), after retries."""


class NetworkError(CountersignError):
    """The API could not be reached or its answer could not be read, after retries."""

    def __init__(self, message: str) -> None:
        super().__init__(codes.UNREACHABLE, message)


class InFlight(CountersignError):
    """The API accepted a vote or claim that the arbiter had not applied yet (202).

    It is durable: read the approval later to see its effect.
    """

    def __init__(self, message: str = "the arbiter has not applied it yet") -> None:
        super().__init__(codes.IN_FLIGHT, message, status=202)


class Aborted(CountersignError):
    """A wait of the blocking client stopped because its :class:`countersign.Abort` was set. The
    approvals it was waiting on were cancelled (best effort, see ``Client(cancel_on_abort=...)``)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(codes.ABORTED, reason or "the wait was aborted")
        self.reason = reason


class InvalidToolCall(CountersignError):
    """A tool call that this client cannot read (no name, arguments not a JSON object)."""

    def __init__(self, message: str, field: Optional[str] = None) -> None:
        super().__init__(codes.INVALID_TOOL_CALL, message, field=field)


class WebhookVerificationError(CountersignError):
    """A webhook that must not be trusted: answer it with 400 or 401 and drop it."""


_BY_CODE: Dict[str, Type[CountersignError]] = {
    codes.ALREADY_CLAIMED: AlreadyClaimed,
    codes.NOT_APPROVED: NotApproved,
    codes.APPROVAL_LAPSED: ApprovalLapsed,
    codes.NOT_PERMITTED: NotPermitted,
    codes.UNKNOWN_APPROVER: UnknownApprover,
    codes.DEADLINE_NOT_LATER: DeadlineNotLater,
    codes.NOT_CLAIMED: NotClaimed,
    codes.OUTCOME_REPORTED: OutcomeReported,
    codes.NOT_AN_APPROVER: NotAnApprover,
    codes.SELF_APPROVAL: SelfApproval,
    codes.DUPLICATE_VOTE: DuplicateVote,
    codes.CLOSED: Closed,
    codes.STALE_ARGUMENTS: StaleArguments,
    codes.DECISION_NOT_ALLOWED: DecisionNotAllowed,
    codes.OUT_OF_ORDER: OutOfOrder,
    codes.ARGUMENTS_CHANGED: ArgumentsChanged,
    codes.UNAUTHENTICATED: Unauthenticated,
    codes.FORBIDDEN: Forbidden,
    codes.APPROVER_NOT_ALLOWED: Forbidden,
    codes.NOT_FOUND: NotFound,
    codes.UNKNOWN_EVENT: NotFound,
}

_BY_STATUS: Dict[int, Type[CountersignError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    413: InvalidRequest,
    429: TooManyRequests,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def api_error(status: int, code: str, message: str, field: Optional[str],
              retry_after: Optional[float] = None) -> CountersignError:
    """The error for an API answer: the class of its code, else of its status. retry_after is a
    429's seconds to wait."""
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or CountersignError
    if status in (409, 422) and cls is CountersignError:
        cls = Refused
    if cls is TooManyRequests:
        return TooManyRequests(code, message, status=status, field=field, retry_after=retry_after)
    return cls(code, message, status=status, field=field)
