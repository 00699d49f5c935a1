"""The blocking client (``http.client``; one connection per request, so one
client is safe to share between threads)."""

from __future__ import annotations

import collections
import http.client
import ssl
import time
from types import TracebackType
from typing import Any, Callable, Collection, Deque, Iterator, List, Mapping, Optional, Tuple, Type

from . import _core
from .errors import CountersignError, InFlight, NetworkError, NotFound, codes
from .ids import new_vote_id
from .toolcalls import ToolCallLike
from .types import Answer, Decision, Event, Question, Record, Result, Run, results_from


class Client:
    """A client of one Countersign API.

    ``url`` and ``token`` default to ``COUNTERSIGN_URL`` and
    ``COUNTERSIGN_TOKEN``. Transient failures (the network, 502/503/504, a
    claim the arbiter has not confirmed yet) are retried with backoff for
    ``retry_for`` seconds per request; a refusal never is. ``timeout`` bounds
    each request beyond the wait it asks the server for.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, retry_for: float = 30.0,
                 min_backoff: float = 0.1, max_backoff: float = 2.0, timeout: float = 30.0,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self._s = _core.settings(url, token, retry_for, min_backoff, max_backoff, timeout)
        self._ssl = ssl_context

    @property
    def url(self) -> str:
        ep = self._s.endpoint
        return f"{ep.scheme}://{ep.host_header}{ep.base_path}"

    # --- agents ---------------------------------------------------------

    def review(self, run: Run, calls: "List[ToolCallLike] | Tuple[ToolCallLike, ...]", *,
               wait: Optional[float] = 0,
               on_result: Optional[Callable[[int, Result], None]] = None) -> List[Result]:
        """Submits tool calls and returns one :class:`Result` per call.

        ``wait=0`` returns at once (gated calls not decided yet are
        ``pending`` with their event id); ``wait=<seconds>`` blocks until every
        call is decided or the time is up; ``wait=None`` blocks until every
        call is decided. Reviewing the same run and call ids again
        re-attaches to the same approvals.

        ``on_result(index, result)`` is called once per call as soon as its
        result is final: allowed and denied calls at once, before anything
        waits, gated ones as humans decide. Run allowed calls from it instead
        of holding them until the batch's last pending call is decided.
        """
        payload, tcs = _core.review_body(run, calls, with_ids=wait != 0)
        deadline = _deadline(wait)
        reported: "set[int]" = set()
        first = on_result is not None
        while True:
            left = _left(deadline)
            path = "/v1/reviews" + (f"?{_core.wait_param(left)}" if left > 0 and not first else "")
            _, answer = self._do("POST", path, payload, waits=0 if first else min(left, _core.MAX_WAIT))
            first = False
            results = results_from(answer, len(tcs))
            _report(results, reported, on_result)
            if all(r.terminal for r in results) or _left(deadline) <= 0:
                return results

    def claim(self, event_id: str, claim_id: str) -> Record:
        """Marks the approval as used, right before the tool runs.

        It succeeds once per approval: retried with the same ``claim_id``
        (after a timeout, a lost answer, a restart) it succeeds again; with
        any other id it raises :class:`AlreadyClaimed`. An approval that is
        not approved raises :class:`NotApproved`. Returns the record.
        """
        _check_claim_id(claim_id)
        _, answer = self._do("POST", _core.approval_path(event_id, "/claim"),
                             _core.encode({"claim_id": claim_id}), accepted_is_transient=True)
        return _record_of(answer)

    def ask(self, run: Run, question: "str | Question", *, id: Optional[str] = None,
            wait: Optional[float] = None) -> Answer:
        """Asks a human (``request_human_input``) and waits for the answer
        (``wait`` as in :meth:`review`). ``id`` (the tool call's id) makes the
        question idempotent within the run."""
        payload = _core.question_body(run, question, id)
        deadline = _deadline(wait)
        while True:
            left = _left(deadline)
            path = "/v1/questions" + (f"?{_core.wait_param(left)}" if left > 0 else "")
            _, answer = self._do("POST", path, payload, waits=min(left, _core.MAX_WAIT))
            a = Answer.from_json(answer if isinstance(answer, dict) else {})
            if a.status != "pending" or _left(deadline) <= 0:
                return a
            if not id and a.event_id:
                # Without an id the question cannot be found again: wait on its approval.
                rec, _ = self.approval(a.event_id, wait=None if deadline is None else _left(deadline))
                return Answer.from_record(rec) if rec.get("status") != "pending" else a

    # --- approvals ------------------------------------------------------

    def approval(self, event_id: str, *, wait: Optional[float] = 0) -> Tuple[Record, int]:
        """Reads an approval's record and revision (``wait`` as in :meth:`review`)."""
        deadline = _deadline(wait)
        while True:
            left = _left(deadline)
            path = _core.approval_path(event_id) + (f"?{_core.wait_param(left)}" if left > 0 else "")
            _, answer = self._do("GET", path, None, waits=min(left, _core.MAX_WAIT))
            rec = _record_of(answer)
            rev = answer.get("revision", 0) if isinstance(answer, dict) else 0
            if rec.get("status") != "pending" or _left(deadline) <= 0:
                return rec, rev if isinstance(rev, int) else 0

    def vote(self, event_id: str, decision: str, *, comment: Optional[str] = None,
             arguments: Optional[Mapping[str, Any]] = None, arguments_sha256: Optional[str] = None,
             answer: Optional[Mapping[str, Any]] = None, vote_id: Optional[str] = None) -> Record:
        """Votes on an approval as the token's subject and returns the record
        once the vote is counted. A refused vote raises the refusal
        (:class:`SelfApproval`, :class:`NotAnApprover`...); a vote the arbiter
        has not applied within the API's wait raises :class:`InFlight`."""
        payload = _core.vote_body(decision, vote_id or new_vote_id(), comment, arguments, arguments_sha256, answer)
        status, ans = self._do("POST", _core.approval_path(event_id, "/votes"), payload)
        if status == 202:
            raise InFlight()
        return _record_of(ans)

    def approve(self, event_id: str, comment: Optional[str] = None) -> Record:
        return self.vote(event_id, "approve", comment=comment)

    def reject(self, event_id: str, reason: str) -> Record:
        return self.vote(event_id, "reject", comment=reason)

    def edit(self, event_id: str, arguments: Mapping[str, Any], comment: Optional[str] = None) -> Record:
        return self.vote(event_id, "edit", arguments=arguments, comment=comment)

    def cancel(self, event_id: str, reason: Optional[str] = None) -> Record:
        body = {"reason": reason} if reason else {}
        status, ans = self._do("POST", _core.approval_path(event_id, "/cancel"), _core.encode(body))
        if status == 202:
            raise InFlight()
        return _record_of(ans)

    # --- streams --------------------------------------------------------

    def events(self, *, last_event_id: Optional[str] = None) -> EventStream:
        """Every new request, outcome and change, from ``GET /v1/events``; see :class:`EventStream`."""
        return EventStream(self, last_event_id)

    def decisions(self, *, watch: Optional[Collection[str]] = None,
                  last_event_id: Optional[str] = None) -> DecisionStream:
        """The outcomes of approvals as they are decided; see :class:`DecisionStream`."""
        return DecisionStream(self, watch, last_event_id)

    # --- transport ------------------------------------------------------

    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        ep = self._s.endpoint
        if ep.scheme == "https":
            return http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout,
                                               context=self._ssl or ssl.create_default_context())
        return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)

    def _once(self, method: str, path: str, payload: Optional[bytes], timeout: float) -> Tuple[int, bytes]:
        conn = self._conn(timeout)
        try:
            conn.request(method, self._s.endpoint.base_path + path, body=payload,
                         headers=_core.headers(self._s, payload is not None))
            resp = conn.getresponse()
            data = resp.read(_core.MAX_ANSWER + 1)
        except (OSError, http.client.HTTPException) as e:
            raise NetworkError(f"{method} {path}: {type(e).__name__}: {e}") from e
        finally:
            conn.close()
        if len(data) > _core.MAX_ANSWER:
            raise CountersignError(codes.BAD_ANSWER, f"{method} {path}: the answer is larger than 64 MiB")
        return resp.status, data

    def _do(self, method: str, path: str, payload: Optional[bytes], *, waits: float = 0,
            accepted_is_transient: bool = False) -> Tuple[int, Any]:
        backoff = _core.Backoff(self._s)
        while True:
            err: Optional[CountersignError] = None
            try:
                status, data = self._once(method, path, payload, self._s.timeout + max(waits, 0))
                if status == 202 and accepted_is_transient:
                    err = InFlight()
                else:
                    return status, _core.decode_answer(status, data)
            except CountersignError as e:
                if not _core.transient(e):
                    raise
                err = e
            delay = backoff.next()
            if delay is None:
                raise err
            time.sleep(delay)


class EventStream(Iterator[Event]):
    """Server-sent events of ``GET /v1/events``: every new request
    (``requested``), outcome (``decided``) and change (``changed``).

    The stream reconnects by itself when the connection breaks or stays
    silent (the server sends a heartbeat every 15 s), sending
    ``Last-Event-ID``; the server may not replay what was missed meanwhile
    (see :class:`DecisionStream`, which reads it again). A stream that
    cannot reconnect within the client's ``retry_for`` raises. Use it as a
    context manager, or call :meth:`open` to connect before iterating (a
    request made after ``open`` returns is on the stream) and :meth:`close`.
    """

    def __init__(self, client: Client, last_event_id: Optional[str] = None,
                 on_connect: Optional[Callable[[], None]] = None) -> None:
        self._c = client
        self._parser = _core.SSEParser()
        self._parser.last_event_id = last_event_id or ""
        self._on_connect = on_connect
        self._conn: Optional[http.client.HTTPConnection] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self._closed = False
        self.connects = 0
        """How many times the stream has connected."""

    @property
    def last_event_id(self) -> str:
        """The id of the last event received; sent as Last-Event-ID on reconnect."""
        return self._parser.last_event_id

    def open(self) -> EventStream:
        if self._resp is None:
            self._connect()
        return self

    def close(self) -> None:
        self._closed = True
        self._drop()

    def __enter__(self) -> EventStream:
        return self.open()

    def __exit__(self, t: Optional[Type[BaseException]], e: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> Event:
        while True:
            ev = self._step()
            if ev is not None:
                return ev

    def _step(self) -> Optional[Event]:
        """Reads up to the next event; None after (re)connecting, so that a
        caller can act on the connection first."""
        if self._closed:
            raise StopIteration
        if self._resp is None:
            self._connect()
            return None
        while True:
            try:
                line = self._resp.readline(_core.MAX_ANSWER)
            except (OSError, http.client.HTTPException):
                line = b""
            if not line:  # the server went away, or stayed silent too long
                self._drop()
                return None
            ev = self._parser.feed(line.decode("utf-8", "replace"))
            if ev is not None:
                return ev

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn, self._resp = None, None

    def _connect(self) -> None:
        c = self._c
        backoff = _core.Backoff(c._s)
        if self._parser.retry is not None:
            time.sleep(min(self._parser.retry, c._s.max_backoff))
        while True:
            err: CountersignError
            conn = c._conn(_core.HEARTBEAT_TIMEOUT)
            try:
                h = _core.headers(c._s, False, accept="text/event-stream")
                if self._parser.last_event_id:
                    h["Last-Event-ID"] = self._parser.last_event_id
                conn.request("GET", c._s.endpoint.base_path + "/v1/events", headers=h)
                resp = conn.getresponse()
                if resp.status == 200:
                    self._conn, self._resp = conn, resp
                    self.connects += 1
                    if self._on_connect is not None:
                        self._on_connect()
                    return
                data = resp.read(1 << 20)
                conn.close()
                try:
                    _core.decode_answer(resp.status, data)
                    err = CountersignError(codes.BAD_ANSWER, f"GET /v1/events answered {resp.status}",
                                           status=resp.status)
                except CountersignError as e:
                    if not _core.transient(e):
                        raise
                    err = e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._drop()
                err = NetworkError(f"GET /v1/events: {type(e).__name__}: {e}")
            delay = backoff.next()
            if delay is None:
                raise err
            time.sleep(delay)


class DecisionStream(Iterator[Decision]):
    """The outcome of every approval decided from now on, as :class:`Decision`.

    ``watch`` holds the event ids the caller waits on; pass a set you own and
    update it as you go (add ids you start waiting on, discard the ones you
    are done with). Each time the stream connects, including the first time
    and every reconnect, it reads the watched approvals again and yields the
    ones already decided: a decision that landed before the stream was open,
    or while it was broken, is not missed even though the server does not
    replay. Each approval's decision is yielded at most once per stream.
    """

    def __init__(self, client: Client, watch: Optional[Collection[str]] = None,
                 last_event_id: Optional[str] = None) -> None:
        self._c = client
        self.watch = watch if watch is not None else set()
        self._ready: Deque[Decision] = collections.deque()
        self._seen: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self.events = EventStream(client, last_event_id, on_connect=self._reread)

    def _reread(self) -> None:
        for event_id in list(self.watch):
            try:
                rec, rev = self._c.approval(event_id)
            except NotFound:
                continue
            if rec.get("status") not in (None, "", "pending"):
                self._ready.append(Decision.from_record(rec, rev))

    def open(self) -> DecisionStream:
        self.events.open()
        return self

    def close(self) -> None:
        self.events.close()

    def __enter__(self) -> DecisionStream:
        return self.open()

    def __exit__(self, t: Optional[Type[BaseException]], e: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __iter__(self) -> DecisionStream:
        return self

    def __next__(self) -> Decision:
        while True:
            if self._ready:
                d = self._ready.popleft()
            else:
                ev = self.events._step()
                if ev is None or ev.kind != "decided" or not isinstance(ev.data, dict):
                    continue
                d = Decision.from_json(ev.data)
            if _first(self._seen, d.event_id):
                return d


def _first(seen: "collections.OrderedDict[str, None]", key: str) -> bool:
    """Records key; False if it was seen already (the newest 10,000 are kept)."""
    if key in seen:
        return False
    seen[key] = None
    if len(seen) > 10_000:
        seen.popitem(last=False)
    return True


def _deadline(wait: Optional[float]) -> Optional[float]:
    if wait is None:
        return None
    if wait < 0:
        raise ValueError("countersign: wait must not be negative")
    return time.monotonic() + wait


def _left(deadline: Optional[float]) -> float:
    if deadline is None:
        return _core.MAX_WAIT
    return max(0.0, deadline - time.monotonic())


def _check_claim_id(claim_id: str) -> None:
    if not isinstance(claim_id, str) or not claim_id:
        raise ValueError("countersign: claim needs a claim id (see new_claim_id)")


def _record_of(answer: Any) -> Record:
    rec = answer.get("record") if isinstance(answer, dict) else None
    if not isinstance(rec, dict):
        raise CountersignError(codes.BAD_ANSWER, "the API answered no record")
    return rec


def _report(results: List[Result], reported: "set[int]", on_result: "Optional[Callable[[int, Result], None]]") -> None:
    """Calls on_result for each final result not reported yet."""
    if on_result is None:
        return
    for i, r in enumerate(results):
        if r.terminal and i not in reported:
            reported.add(i)
            on_result(i, r)
