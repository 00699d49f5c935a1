"""The blocking client (``http.client``; one connection per request, so one
client is safe to share between threads)."""

from __future__ import annotations

import collections
import http.client
import logging
import socket
import ssl
import threading
import time
from types import TracebackType
from typing import Any, Callable, Collection, Deque, Iterator, List, Mapping, Optional, Tuple, Type

from . import _core
from .errors import Aborted, Closed, CountersignError, InFlight, NetworkError, NotFound, codes
from .ids import new_report_id, new_vote_id
from .toolcalls import ToolCallLike
from .types import Answer, Decision, Event, Outcome, Question, Record, Result, Run, results_from


_log = logging.getLogger("countersign")


class Abort(threading.Event):
    """An explicit cancel of a waiting call, for the blocking client.

    Pass one as ``abort=`` to :meth:`Client.review` or :meth:`Client.ask`
    (or :meth:`GatedTool.invoke`) and call :meth:`abort` (or ``set()``) from
    any thread: the wait stops at once, the approvals it was waiting on are
    cancelled (best effort, within the client's ``cancel_on_abort`` seconds)
    and the call raises :class:`Aborted`. It is a :class:`threading.Event`,
    so it can also be waited on. An abort cannot be undone; use a new one
    per call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._hooks_lock = threading.Lock()
        self._hooks: List[Callable[[], None]] = []
        self.reason = ""
        """Why, as given to :meth:`abort`."""
        self.at: Optional[float] = None
        """When it was set (``time.monotonic()``)."""

    def abort(self, reason: str = "") -> None:
        """Aborts the calls that wait with this object; ``reason`` goes to the server's log."""
        with self._hooks_lock:
            if self.is_set():
                return
            self.reason, self.at = reason, time.monotonic()
            super().set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def set(self) -> None:
        self.abort()

    def clear(self) -> None:
        raise RuntimeError("countersign: an Abort cannot be undone; use a new one")

    def _on_abort(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Runs hook when the abort comes (at once if it came); returns its removal."""
        with self._hooks_lock:
            if not self.is_set():
                self._hooks.append(hook)

                def remove() -> None:
                    with self._hooks_lock:
                        if hook in self._hooks:
                            self._hooks.remove(hook)
                return remove
        hook()
        return lambda: None


class Client:
    """A client of one Countersign API.

    ``url`` and ``token`` default to ``COUNTERSIGN_URL`` and
    ``COUNTERSIGN_TOKEN``. Transient failures (the network, a request
    unanswered ``timeout`` seconds beyond the wait it asks the server for,
    502/503/504, a claim the arbiter has not confirmed yet) are retried with
    backoff; a refusal never is. A wait (``review``, ``ask`` or ``approval``
    with ``wait`` other than 0, and ``@gated``'s wait and claim) retries them
    for as long as it waits (``wait=None``: until there is a decision): it
    survives any restart of the server, however late in a long poll,
    because each request it repeats is idempotent (a review by run id and
    tool call id). A single call retries them for ``retry_for`` seconds from
    its first failure. ``poll_wait`` is how long one request of a wait asks
    the server to wait before asking again (at most 60, the API's limit).

    ``cancel_on_abort`` is how many seconds an aborted wait (an
    :class:`Abort`, a cancelled asyncio task) may spend cancelling the
    approvals it was waiting on; ``None``: leave them pending. A wait that
    merely ends (``wait=`` runs out, the process exits) cancels nothing.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, retry_for: float = 30.0,
                 min_backoff: float = 0.1, max_backoff: float = 2.0, timeout: float = 30.0,
                 ssl_context: Optional[ssl.SSLContext] = None, cancel_on_abort: Optional[float] = 5.0,
                 poll_wait: float = _core.MAX_WAIT) -> None:
        self._s = _core.settings(url, token, retry_for, min_backoff, max_backoff, timeout, poll_wait)
        self._ssl = ssl_context
        self._cancel_on_abort = _check_cancel_on_abort(cancel_on_abort)

    @property
    def url(self) -> str:
        ep = self._s.endpoint
        return f"{ep.scheme}://{ep.host_header}{ep.base_path}"

    # --- agents ---------------------------------------------------------

    def review(self, run: Run, calls: "List[ToolCallLike] | Tuple[ToolCallLike, ...]", *,
               wait: Optional[float] = 0,
               on_result: Optional[Callable[[int, Result], None]] = None,
               abort: Optional[Abort] = None) -> List[Result]:
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

        ``abort`` (an :class:`Abort`) set from another thread while the
        review waits cancels the approvals it is waiting on and raises
        :class:`Aborted`. A wait that runs out cancels nothing.
        """
        _check_abort(abort)
        payload, tcs = _core.review_body(run, calls, with_ids=wait != 0)
        deadline = _deadline(wait)
        reported: "set[int]" = set()
        watch = abort is not None and wait != 0 and self._cancel_on_abort is not None
        # With on_result the first request does not wait: what is final is
        # handed over at once. Nor does it when an abort may come: its
        # answer names the approvals to cancel before the long wait.
        first = on_result is not None or watch
        opened: List[str] = []
        try:
            while True:
                left = min(_left(deadline), self._s.poll_wait)
                path = "/v1/reviews" + (f"?{_core.wait_param(left)}" if left > 0 and not first else "")
                _, answer = self._do("POST", path, payload, waits=0 if first else left,
                                     abort=abort, finish=first and watch, persist=wait != 0, retry_until=deadline)
                first = False
                results = results_from(answer, len(tcs))
                opened = _pending_ids(results)
                _check_abort(abort)
                _report(results, reported, on_result)
                if all(r.terminal for r in results) or _left(deadline) <= 0:
                    return results
        except Aborted:
            if watch and abort is not None:
                self._abandon(opened, abort)
            raise

    def claim(self, event_id: str, claim_id: str) -> Record:
        """Marks the approval as used, right before the tool runs.

        It succeeds once per approval: retried with the same ``claim_id``
        (after a timeout, a lost answer, a restart) it succeeds again; with
        any other id it raises :class:`AlreadyClaimed`. An approval that is
        not approved raises :class:`NotApproved`. Returns the record.
        """
        return self._claim(event_id, claim_id, False)

    def _claim(self, event_id: str, claim_id: str, persist: bool) -> Record:
        """claim; with persist, transient failures are retried until it succeeds or is refused."""
        _check_claim_id(claim_id)
        _, answer = self._do("POST", _core.approval_path(event_id, "/claim"),
                             _core.encode({"claim_id": claim_id}), accepted_is_transient=True, persist=persist)
        return _record_of(answer)

    def report(self, event_id: str, outcome: Outcome, *, command_id: Optional[str] = None) -> Record:
        """Tells Countersign how the claimed call ``event_id`` ended, as its claimant, once.

        ``outcome`` is ``{"status": "succeeded" | "failed", "summary": ..., "result_sha256": ...}``; the
        summary is cut to 1 KiB of UTF-8 on a character boundary. A gated function reports by itself; a
        runner that claims with :meth:`claim` reports with this after the tool ran. Sent again with the
        same ``command_id`` (keep it with the run: after a lost answer, a restart) it is the same report;
        another report raises :class:`OutcomeReported`, one before a claim :class:`NotClaimed`, one by
        anyone but the claimant :class:`NotPermitted`. Transient failures, and a report the arbiter has
        not applied yet (202), are retried with the same id for ``retry_for`` seconds. Returns the
        record.
        """
        body = _core.outcome_body(outcome, command_id or new_report_id())
        _, answer = self._do("POST", _core.approval_path(event_id, "/outcome"), body, accepted_is_transient=True)
        return _record_of(answer)

    def ask(self, run: Run, question: "str | Question", *, id: Optional[str] = None,
            wait: Optional[float] = None, abort: Optional[Abort] = None) -> Answer:
        """Asks a human (``request_human_input``) and waits for the answer
        (``wait`` and ``abort`` as in :meth:`review`). ``id`` (the tool call's
        id) makes the question idempotent within the run."""
        _check_abort(abort)
        payload = _core.question_body(run, question, id)
        deadline = _deadline(wait)
        watch = abort is not None and wait != 0 and self._cancel_on_abort is not None
        first = watch
        opened: List[str] = []
        try:
            while True:
                left = min(_left(deadline), self._s.poll_wait)
                path = "/v1/questions" + (f"?{_core.wait_param(left)}" if left > 0 and not first else "")
                _, answer = self._do("POST", path, payload, waits=0 if first else left,
                                     abort=abort, finish=first and watch, persist=wait != 0, retry_until=deadline)
                first = False
                a = Answer.from_json(answer if isinstance(answer, dict) else {})
                opened = [a.event_id] if a.status == "pending" and a.event_id else []
                _check_abort(abort)
                if a.status != "pending" or _left(deadline) <= 0:
                    return a
                if not id and a.event_id:
                    # Without an id the question cannot be found again: wait on its approval.
                    rec, _ = self._approval(a.event_id, None if deadline is None else _left(deadline), abort)
                    return Answer.from_record(rec) if rec.get("status") != "pending" else a
        except Aborted:
            if watch and abort is not None:
                self._abandon(opened, abort)
            raise

    # --- approvals ------------------------------------------------------

    def approval(self, event_id: str, *, wait: Optional[float] = 0) -> Tuple[Record, int]:
        """Reads an approval's record and revision (``wait`` as in :meth:`review`)."""
        return self._approval(event_id, wait, None)

    def _approval(self, event_id: str, wait: Optional[float], abort: Optional[Abort]) -> Tuple[Record, int]:
        deadline = _deadline(wait)
        while True:
            left = min(_left(deadline), self._s.poll_wait)
            path = _core.approval_path(event_id) + (f"?{_core.wait_param(left)}" if left > 0 else "")
            _, answer = self._do("GET", path, None, waits=left, abort=abort, persist=wait != 0,
                                 retry_until=deadline)
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

    def cancel(self, event_id: str, reason: Optional[str] = None) -> Optional[Record]:
        """Cancels the pending approval ``event_id``, as the agent that submitted
        it (or an approver or admin of it); ``reason`` goes to the server's log.

        Returns the cancelled record, or ``None`` when the arbiter had not
        confirmed it within the API's wait (202): the cancellation is durable
        and counts as done. An approval decided already raises
        :class:`Closed`; a token that may not cancel it :class:`NotPermitted`.
        """
        return self._cancel(event_id, reason, None)

    def _cancel(self, event_id: str, reason: Optional[str], until: Optional[float]) -> Optional[Record]:
        status, ans = self._do("POST", _core.approval_path(event_id, "/cancel"), _core.cancel_body(reason),
                               until=until)
        return None if status == 202 else _record_of(ans)

    def _abandon(self, event_ids: List[str], abort: Abort) -> None:
        """Cancels the approvals an aborted wait was waiting on, until cancel_on_abort has passed since
        the abort; what fails is logged."""
        until = (abort.at or time.monotonic()) + (self._cancel_on_abort or 0)
        for event_id in event_ids:
            try:
                if time.monotonic() >= until:
                    raise NetworkError(f"gave up after {self._cancel_on_abort} s")
                self._cancel(event_id, _core.aborted_reason(abort.reason), until)
            except Closed:
                pass  # decided meanwhile: nothing to cancel
            except CountersignError as e:
                _log.warning("countersign: could not cancel approval %s after an abort: %s", event_id, e)

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

    def _once(self, method: str, path: str, payload: Optional[bytes], timeout: float,
              abort: Optional[Abort] = None, finish: bool = False) -> Tuple[int, bytes]:
        """One request. An abort cuts its connection at once, or with finish
        (a request whose answer names what to cancel) when the time the abort
        may take has passed."""
        conn = self._conn(timeout)
        unhook: Callable[[], None] = lambda: None
        timers: List[threading.Timer] = []
        try:
            conn.connect()
            if abort is not None:
                ab = abort

                def cut() -> None:
                    if not finish:
                        _shut(conn)
                        return
                    left = (ab.at or time.monotonic()) + (self._cancel_on_abort or 0) - time.monotonic()
                    t = threading.Timer(max(left, 0), _shut, (conn,))
                    t.daemon = True
                    timers.append(t)
                    t.start()
                unhook = abort._on_abort(cut)
            conn.request(method, self._s.endpoint.base_path + path, body=payload,
                         headers=_core.headers(self._s, payload is not None))
            resp = conn.getresponse()
            data = resp.read(_core.MAX_ANSWER + 1)
        except (OSError, http.client.HTTPException) as e:
            raise NetworkError(f"{method} {path}: {type(e).__name__}: {e}") from e
        finally:
            unhook()
            for t in timers:
                t.cancel()
            conn.close()
        if len(data) > _core.MAX_ANSWER:
            raise CountersignError(codes.BAD_ANSWER, f"{method} {path}: the answer is larger than 64 MiB")
        return resp.status, data

    def _do(self, method: str, path: str, payload: Optional[bytes], *, waits: float = 0,
            accepted_is_transient: bool = False, abort: Optional[Abort] = None, finish: bool = False,
            until: Optional[float] = None, persist: bool = False,
            retry_until: Optional[float] = None) -> Tuple[int, Any]:
        """One request, its transient failures retried: for retry_for from the first failure, or with
        persist until retry_until (None: until it succeeds or is refused); never past until, which also
        bounds each attempt (time.monotonic())."""
        backoff = _core.Backoff(self._s, until if not persist else _min(until, retry_until), persist)
        while True:
            err: Optional[CountersignError] = None
            try:
                status, data = self._once(method, path, payload, _core.request_timeout(self._s, waits, until),
                                          abort, finish)
                if status == 202 and accepted_is_transient:
                    err = InFlight()
                else:
                    return status, _core.decode_answer(status, data)
            except CountersignError as e:
                if abort is not None and abort.is_set():
                    raise Aborted(abort.reason) from e
                if not _core.transient(e):
                    raise
                err = e
            delay = backoff.next()
            if delay is None:
                raise err
            if abort is None:
                time.sleep(delay)
            elif abort.wait(delay):
                raise Aborted(abort.reason)


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


def _min(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """The earlier of two optional bounds."""
    if a is None:
        return b
    return a if b is None else min(a, b)


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


def _check_abort(abort: Optional[Abort]) -> None:
    if abort is not None and abort.is_set():
        raise Aborted(abort.reason)


def _check_cancel_on_abort(v: Optional[float]) -> Optional[float]:
    if v is not None and not (v >= 0 and v != float("inf")):
        raise ValueError(f"countersign: cancel_on_abort must be a finite number ≥ 0 or None, got {v!r}")
    return v


def _pending_ids(results: List[Result]) -> List[str]:
    """The event ids of the results still pending: what an aborted wait cancels."""
    return _core.pending_ids([(r.event_id, r.verdict) for r in results])


def _shut(conn: http.client.HTTPConnection) -> None:
    """Cuts a connection another thread may be blocked on (close() alone does not wake a blocked read)."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


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
