"""What the sync and asyncio clients share: configuration, request bodies,
the reading of answers, the retry rule and the SSE parser. No I/O here."""

from __future__ import annotations

import json
import math
import os
import random
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import quote, urlsplit

from .errors import CountersignError, InFlight, NetworkError, api_error, codes
from .toolcalls import ToolCallLike, to_tool_call
from .types import Event, Outcome, Question, Run, ToolCall

MAX_WAIT = 60.0
"""The longest wait the API grants one request, in seconds."""

MAX_ANSWER = 64 << 20
"""The largest answer body read, in bytes."""

HEARTBEAT_TIMEOUT = 45.0
"""An event stream silent this long (the server sends a heartbeat every 15 s) is reconnected."""

USER_AGENT = "countersign-python/0.1"


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


@dataclass(frozen=True)
class Settings:
    """A client's validated configuration."""

    endpoint: Endpoint
    token: str
    retry_for: float
    min_backoff: float
    max_backoff: float
    timeout: float
    poll_wait: float = MAX_WAIT
    """How long one request of a wait asks the server to wait before it is asked again."""


def settings(url: Optional[str], token: Optional[str], retry_for: float, min_backoff: float,
             max_backoff: float, timeout: float, poll_wait: float = MAX_WAIT) -> Settings:
    url = url or os.environ.get("COUNTERSIGN_URL") or ""
    token = token or os.environ.get("COUNTERSIGN_TOKEN") or ""
    problems = []
    endpoint = None
    if not url:
        problems.append("url is required (or set COUNTERSIGN_URL)")
    else:
        u = urlsplit(url)
        try:
            port = u.port
        except ValueError:
            port, u = None, urlsplit("")
        if u.scheme not in ("http", "https") or not u.hostname:
            problems.append(f"url {url!r} is not an http(s) URL")
        else:
            path = u.path.rstrip("/")
            if path.endswith("/v1"):  # the API line `serve` prints
                path = path[:-3]
            endpoint = Endpoint(u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80), path)
    if not token:
        problems.append("token is required (or set COUNTERSIGN_TOKEN)")
    for name, v in (("retry_for", retry_for), ("min_backoff", min_backoff), ("max_backoff", max_backoff),
                    ("timeout", timeout)):
        if not (v >= 0 and math.isfinite(v)):
            problems.append(f"{name} must be a finite number ≥ 0, got {v!r}")
    if min_backoff > max_backoff:
        problems.append("min_backoff must not exceed max_backoff")
    if not (0 < poll_wait <= MAX_WAIT):
        problems.append(f"poll_wait must be more than 0 and at most {MAX_WAIT:g} seconds, got {poll_wait!r}")
    if problems or endpoint is None:
        raise ValueError("countersign: " + "; ".join(problems))
    return Settings(endpoint, token, retry_for, min_backoff, max_backoff, timeout, poll_wait)


def headers(s: Settings, has_body: bool, accept: str = "application/json") -> Dict[str, str]:
    h = {"Authorization": "Bearer " + s.token, "Accept": accept, "User-Agent": USER_AGENT}
    if has_body:
        h["Content-Type"] = "application/json"
    return h


def encode(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def wait_param(seconds: float) -> str:
    return f"wait={max(1, int(min(seconds, MAX_WAIT) * 1000))}ms"


def approval_path(event_id: str, suffix: str = "") -> str:
    if not isinstance(event_id, str) or not event_id:
        raise ValueError("countersign: an event id is required")
    return "/v1/approvals/" + quote(event_id, safe="") + suffix


def review_body(run: Run, calls: Sequence[ToolCallLike], with_ids: bool = False) -> Tuple[bytes, List[ToolCall]]:
    """The body of a review. with_ids gives the run and the calls that lack
    one an id of the client's: a review that polls sends the same body again,
    and without ids every request would open approvals of its own."""
    tcs = [to_tool_call(c) for c in calls]
    if not tcs:
        raise ValueError("countersign: review needs at least one tool call")
    body_run: Dict[str, Any] = dict(run)
    if with_ids:
        if not body_run.get("id"):
            body_run["id"] = "run-" + uuid.uuid4().hex
        for i, tc in enumerate(tcs):
            if not tc.get("id"):
                tc["id"] = f"call-{i}-{uuid.uuid4().hex}"
    return encode({"run": body_run, "tool_calls": tcs}), tcs


MAX_SUMMARY_BYTES = 1024
"""The most bytes of UTF-8 an outcome's summary may hold."""

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def summary_text(text: str) -> str:
    """text fit for an outcome's summary: control characters (other than tab and line breaks) become
    spaces, and text longer than MAX_SUMMARY_BYTES of UTF-8 is cut on a character boundary."""
    data = _CONTROL.sub(" ", text).encode("utf-8", "replace")
    return data[:MAX_SUMMARY_BYTES].decode("utf-8", "ignore")


def outcome_body(outcome: Outcome, command_id: str) -> bytes:
    status = outcome.get("status")
    if status not in ("succeeded", "failed"):
        raise ValueError("countersign: an outcome's status is succeeded or failed")
    body: Dict[str, Any] = {"command_id": command_id, "status": status}
    if outcome.get("summary"):
        body["summary"] = summary_text(outcome["summary"])
    if outcome.get("result_sha256"):
        body["result_sha256"] = outcome["result_sha256"]
    return encode(body)


def error_text(err: BaseException) -> str:
    """A failed call's summary: the exception's message, or its type's name."""
    return str(err) or type(err).__name__


def question_body(run: Run, question: "str | Question", question_id: Optional[str]) -> bytes:
    q: Dict[str, Any] = {"text": question} if isinstance(question, str) else dict(question)
    body: Dict[str, Any] = {"run": dict(run), "question": q}
    if question_id:
        body["id"] = question_id
    return encode(body)


def vote_body(decision: str, vote_id: str, comment: Optional[str], arguments: Optional[Mapping[str, Any]],
              arguments_sha256: Optional[str], answer: Optional[Mapping[str, Any]]) -> bytes:
    body: Dict[str, Any] = {"vote_id": vote_id, "decision": decision}
    if comment:
        body["comment"] = comment
    if arguments is not None:
        body["arguments"] = dict(arguments)
    if arguments_sha256:
        body["arguments_sha256"] = arguments_sha256
    if answer is not None:
        body["answer"] = dict(answer)
    return encode(body)


def decode_answer(status: int, data: bytes) -> Any:
    """The JSON of a 2xx answer, or raises the API's error for any other."""
    if 200 <= status < 300:
        if status == 202 or not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise CountersignError(codes.BAD_ANSWER, "the API's answer is not JSON", status=status) from None
    code, message, field = f"http_{status}", data.decode("utf-8", "replace").strip()[:500], None
    retry_after: Optional[float] = None
    try:
        env = json.loads(data)
        err = env.get("error") if isinstance(env, dict) else None
        if isinstance(err, dict) and isinstance(err.get("code"), str) and err["code"]:
            code = err["code"]
            message = str(err.get("message") or "")
            field = err.get("field") if isinstance(err.get("field"), str) and err.get("field") else None
            # A 429 says in its body, as in its Retry-After header, when to send again.
            ra = err.get("retry_after")
            if status == 429 and isinstance(ra, (int, float)) and not isinstance(ra, bool) and ra > 0:
                retry_after = float(ra)
    except ValueError:
        pass
    raise api_error(status, code, message, field, retry_after)


def transient(err: BaseException) -> bool:
    """Whether a request that failed with err may succeed if sent again."""
    if isinstance(err, NetworkError):
        return True
    return isinstance(err, CountersignError) and err.status in (502, 503, 504)


class Backoff:
    """The waits between retries: doubling from min_backoff to max_backoff
    (with jitter), for at most retry_for seconds from the first failure, and
    no later than until (time.monotonic()) when given.

    With persist (a wait, whose requests are idempotent) retry_for does not
    apply: retries go on until ``until``, or for ever when it is None."""

    def __init__(self, s: Settings, until: Optional[float] = None, persist: bool = False) -> None:
        self._s = s
        self._until = until
        self._persist = persist
        self._deadline: Optional[float] = None
        self._started = False
        self._delay = s.min_backoff

    def next(self) -> Optional[float]:
        """The wait before the next attempt, or None when time is up."""
        now = time.monotonic()
        if not self._started:
            self._started = True
            self._deadline = self._until if self._persist else now + self._s.retry_for
            if self._until is not None and self._deadline is not None:
                self._deadline = min(self._deadline, self._until)
        left = math.inf if self._deadline is None else self._deadline - now
        if left <= 0:
            return None
        d = min(self._delay * random.uniform(0.5, 1.0), left)
        self._delay = min(self._delay * 2, self._s.max_backoff)
        return d

    def reset(self) -> None:
        self._started = False
        self._deadline = None
        self._delay = self._s.min_backoff


def request_timeout(s: Settings, waits: float, until: Optional[float]) -> float:
    """How long one request may take: the client's timeout beyond the wait it asks the server for,
    and no later than until (time.monotonic()) when given."""
    t = s.timeout + max(waits, 0)
    if until is not None:
        t = min(t, max(0.001, until - time.monotonic()))
    return t


def cancel_body(reason: Optional[str]) -> bytes:
    return encode({"reason": reason} if reason else {})


def aborted_reason(reason: str) -> str:
    """What a cancel after an abort tells the server's log."""
    return "the client aborted the call" + (": " + reason[:200] if reason else "")


def pending_ids(event_ids_and_verdicts: Sequence[Tuple[str, str]]) -> List[str]:
    """The event ids of the pending ones."""
    return [e for e, v in event_ids_and_verdicts if v == "pending" and e]


def accepted_error(err: Optional[BaseException]) -> BaseException:
    return err if err is not None else InFlight()


class SSEParser:
    """Server-sent events, one line at a time (the WHATWG event-stream format)."""

    def __init__(self) -> None:
        self.last_event_id = ""
        self.retry: Optional[float] = None
        self._event = ""
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[Event]:
        """Feeds one line (with or without its line ending); returns the event a blank line completes."""
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data:
                self._event = ""
                return None
            raw = "\n".join(self._data)
            kind = self._event or "message"
            self._event, self._data = "", []
            try:
                data: Any = json.loads(raw)
            except ValueError:
                data = raw
            return Event(kind=kind, id=self.last_event_id, data=data)
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value.isdigit():
                self.retry = int(value) / 1000
        return None
