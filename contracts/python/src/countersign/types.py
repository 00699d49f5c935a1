"""The values the client sends and receives.

Inputs are ``TypedDict``s, so plain dicts work: ``{"id": "run-1", "agent":
"billing-bot"}`` is a :class:`Run`. Answers are frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Mapping, Optional, TypedDict

from .errors import CountersignError, codes

Verdict = Literal[
    "allowed", "denied", "pending", "responded", "answered", "expired", "cancelled", "already_executed"
]
"""What a review answers for one tool call (DESIGN §5). Only ``allowed`` runs."""

Status = Literal["pending", "approved", "rejected", "responded", "answered", "expired", "cancelled"]
"""The status of an approval record."""

VoteDecision = Literal["approve", "reject", "edit", "respond", "answer"]
"""A vote's decision."""

Record = Dict[str, Any]
"""An approval record (``countersign.approval/v1``) as the API returns it."""

JSONObject = Dict[str, Any]


class _RunRequired(TypedDict):
    agent: str


class Run(_RunRequired, total=False):
    """The run a tool call belongs to. ``agent`` is required; ``id`` makes
    reviews idempotent (with the tool call's id)."""

    id: str
    thread_id: str
    requested_by: str
    owner: str
    tenant: str
    labels: Dict[str, str]


class _ToolCallRequired(TypedDict):
    name: str


class ToolCall(_ToolCallRequired, total=False):
    """One call the agent proposes, in Countersign's own shape."""

    id: str
    arguments: JSONObject
    tool_schema: JSONObject


class _OutcomeRequired(TypedDict):
    status: Literal["succeeded", "failed"]


class Outcome(_OutcomeRequired, total=False):
    """How a claimed call ended, as its claimant reports it once (``Client.report``; the record's
    ``execution``)."""

    summary: str
    """A short text for people: at most 1 KiB of UTF-8 (``report`` cuts a longer one on a character
    boundary)."""
    result_sha256: str
    """The lowercase hex SHA-256 of the call's result (optional)."""


class Question(TypedDict, total=False):
    """A question for a human (``request_human_input``)."""

    text: str
    schema: JSONObject


def _bad(what: str) -> CountersignError:
    return CountersignError(codes.BAD_ANSWER, f"the API answered {what}")


def _str(m: Mapping[str, Any], key: str) -> str:
    v = m.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise _bad(f"a {key} that is not a string")
    return v


def _obj(m: Mapping[str, Any], key: str) -> Optional[JSONObject]:
    v = m.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise _bad(f"a {key} that is not an object")
    return v


@dataclass(frozen=True)
class Result:
    """The answer for one tool call of a review."""

    tool_call_id: str
    verdict: Verdict
    event_id: str = ""
    reason: str = ""
    """Why the call does not run, in words for the model."""
    rule: str = ""
    arguments: Optional[JSONObject] = None
    """The arguments to run with when allowed (possibly edited by a human)."""
    grant_id: str = ""
    """The standing grant that allowed the call without a new request."""
    receipt: str = ""
    """The receipt Countersign signed for a call allowed without an approval (under a standing grant,
    or by a policy rule with ``receipt: true``): pass it to the tool in the Countersign-Receipt header.
    An approved call's receipt comes with its claim (``record["claim"]["receipt"]``)."""
    code: str = ""
    """A stable code for a verdict worth branching on: ``approval_lapsed`` (expired: approved, but not
    claimed within its rule's ``claim_within``), ``request_refused`` (denied: Countersign refused the
    approval request)."""

    @property
    def terminal(self) -> bool:
        """Whether the result is final (not pending)."""
        return self.verdict != "pending"

    @property
    def allowed(self) -> bool:
        """Whether the call may run (after a claim, when it has an event id)."""
        return self.verdict == "allowed"

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> Result:
        verdict = _str(m, "verdict")
        if not verdict:
            raise _bad("a result without a verdict")
        return cls(
            tool_call_id=_str(m, "tool_call_id"),
            verdict=verdict,  # type: ignore[arg-type]  # an unknown verdict never runs
            event_id=_str(m, "event_id"),
            reason=_str(m, "reason"),
            rule=_str(m, "rule"),
            arguments=_obj(m, "arguments"),
            grant_id=_str(m, "grant_id"),
            receipt=_str(m, "receipt"),
            code=_str(m, "code"),
        )


@dataclass(frozen=True)
class Answer:
    """A human's answer to a question, or why there is none."""

    status: str
    """answered, or pending, expired, cancelled, denied."""
    event_id: str = ""
    action: str = ""
    """accept, decline or cancel (MCP elicitation) when answered."""
    content: Any = None
    answered_by: str = ""
    reason: str = ""
    rule: str = ""

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> Answer:
        ans = _obj(m, "answer") or {}
        return cls(
            status=_str(m, "status"), event_id=_str(m, "event_id"), action=_str(ans, "action"),
            content=ans.get("content"), answered_by=_str(ans, "answered_by"),
            reason=_str(m, "reason"), rule=_str(m, "rule"),
        )

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Answer:
        out = _obj(rec, "outcome") or {}
        req = _obj(rec, "request") or {}
        status = _str(rec, "status")
        action, content = "", None
        if status == "answered":
            action, content = _str(out, "action"), out.get("arguments")
            if not action and isinstance(content, dict):
                action, content = _str(content, "action"), content.get("content")
        by = out.get("decided_by") or []
        return cls(status=status, event_id=_str(req, "event_id"), action=action, content=content,
                   answered_by=by[0] if by and isinstance(by[0], str) else "", reason=_str(out, "reason"))


@dataclass(frozen=True)
class Decision:
    """The outcome of an approval, from the event stream, a webhook or the record."""

    event_id: str
    status: str
    agent: str = ""
    run_id: str = ""
    tool_name: str = ""
    outcome: Optional[JSONObject] = None
    """decision, arguments, arguments_sha256, diff, comment, decided_by, decided_at, reason."""
    revision: int = 0
    decided_at: str = ""

    @property
    def approved(self) -> bool:
        return self.status == "approved"

    @property
    def arguments(self) -> Optional[JSONObject]:
        """The approved (possibly edited) arguments, when approved."""
        if self.outcome is None or not self.approved:
            return None
        args = self.outcome.get("arguments")
        return args if isinstance(args, dict) else None

    @property
    def reason(self) -> str:
        """The outcome's reason or comment (why it was rejected, the feedback)."""
        if self.outcome is None:
            return ""
        return _str(self.outcome, "reason") or _str(self.outcome, "comment")

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> Decision:
        """From a ``countersign.approval.decided/v1`` event."""
        rev = m.get("revision", 0)
        return cls(
            event_id=_str(m, "event_id"), status=_str(m, "status"), agent=_str(m, "agent"),
            run_id=_str(m, "run_id"), tool_name=_str(m, "tool_name"), outcome=_obj(m, "outcome"),
            revision=rev if isinstance(rev, int) else 0, decided_at=_str(m, "decided_at"),
        )

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], revision: int = 0) -> Decision:
        """From a terminal approval record."""
        req = _obj(rec, "request") or {}
        run = _obj(req, "run") or {}
        call = _obj(req, "tool_call") or {}
        out = _obj(rec, "outcome")
        return cls(
            event_id=_str(req, "event_id"), status=_str(rec, "status"), agent=_str(run, "agent"),
            run_id=_str(run, "id"), tool_name=_str(call, "name"), outcome=out, revision=revision,
            decided_at=_str(out, "decided_at") if out else "",
        )


@dataclass(frozen=True)
class Event:
    """One server-sent event of ``GET /v1/events``."""

    kind: str
    """requested, decided or changed."""
    id: str
    data: Any


def results_from(answer: Any, n: int) -> List[Result]:
    if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
        raise _bad("no results")
    results = [Result.from_json(r) for r in answer["results"] if isinstance(r, dict)]
    if len(results) != n:
        raise _bad(f"{len(results)} results for {n} tool calls")
    return results
