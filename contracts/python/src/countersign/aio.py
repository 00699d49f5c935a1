"""The asyncio client.

It speaks HTTP/1.1 over ``asyncio`` streams itself (one connection per
request, ``Connection: close``) rather than running the blocking client in
threads: a wait on an approval can last hours, and an agent runtime may hold
hundreds of them. In threads each wait would hold a thread of a small pool
and could not be cancelled (a cancelled task leaves its thread blocked until
the server answers); on streams a wait costs one socket and a cancelled task
closes it at once. The price is a small HTTP client here (no proxies; TLS
with ``ssl_context``), covered by the same tests as the blocking client.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time

from types import TracebackType
from typing import Any, AsyncIterator, Callable, Collection, Deque, Dict, List, Mapping, Optional, Tuple, Type

from . import _core
from .client import (_check_cancel_on_abort, _check_claim_id, _deadline, _first, _left, _log, _min, _pending_ids,
                     _record_of, _report)
from .errors import Closed, CountersignError, InFlight, NetworkError, NotFound, codes
from .ids import new_report_id, new_vote_id
from .toolcalls import ToolCallLike
from .types import Answer, Decision, Event, Outcome, Question, Record, Result, Run, results_from

_LINE_LIMIT = 4 << 20  # the longest header or event line read


class AsyncClient:
    """The asyncio form of :class:`countersign.Client`: the same methods, awaited.

    Cancelling the task that awaits a waiting :meth:`review` or :meth:`ask`
    is an explicit cancel of the calls: the approvals it was waiting on are
    cancelled (best effort, shielded, within ``cancel_on_abort`` seconds)
    and the :class:`asyncio.CancelledError` goes on. A wait that merely ends
    (``wait=`` runs out, the process exits) cancels nothing.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, retry_for: float = 30.0,
                 min_backoff: float = 0.1, max_backoff: float = 2.0, timeout: float = 30.0,
                 ssl_context: Optional[ssl.SSLContext] = None, cancel_on_abort: Optional[float] = 5.0,
                 poll_wait: float = _core.MAX_WAIT) -> None:
        self._s = _core.settings(url, token, retry_for, min_backoff, max_backoff, timeout, poll_wait)
        self._ssl = ssl_context
        self._cancel_on_abort = _check_cancel_on_abort(cancel_on_abort)

    async def review(self, run: Run, calls: "List[ToolCallLike] | Tuple[ToolCallLike, ...]", *,
                     wait: Optional[float] = 0,
                     on_result: Optional[Callable[[int, Result], None]] = None) -> List[Result]:
        """See :meth:`countersign.Client.review`. Cancelling the awaiting task
        while it waits cancels the approvals it is waiting on, then re-raises."""
        payload, tcs = _core.review_body(run, calls, with_ids=wait != 0)
        deadline = _deadline(wait)
        reported: "set[int]" = set()
        watch = wait != 0 and self._cancel_on_abort is not None
        first = on_result is not None or watch  # as in Client.review
        opened: List[str] = []
        learning: "Optional[asyncio.Future[Tuple[int, Any]]]" = None
        try:
            while True:
                left = min(_left(deadline), self._s.poll_wait)
                path = "/v1/reviews" + (f"?{_core.wait_param(left)}" if left > 0 and not first else "")
                if first and watch:
                    # Runs on if the task is cancelled meanwhile: its answer names what to cancel.
                    learning = asyncio.ensure_future(self._do("POST", path, payload, persist=True,
                                                              retry_until=deadline))
                    _, answer = await asyncio.shield(learning)
                    learning = None
                else:
                    _, answer = await self._do("POST", path, payload, waits=0 if first else left,
                                               persist=wait != 0, retry_until=deadline)
                first = False
                results = results_from(answer, len(tcs))
                opened = _pending_ids(results)
                _report(results, reported, on_result)
                if all(r.terminal for r in results) or _left(deadline) <= 0:
                    return results
        except asyncio.CancelledError:
            if watch:
                await self._abandon(opened, learning, lambda a: _pending_ids(results_from(a, len(tcs))))
            raise

    async def claim(self, event_id: str, claim_id: str) -> Record:
        """See :meth:`countersign.Client.claim`."""
        return await self._claim(event_id, claim_id, False)

    async def _claim(self, event_id: str, claim_id: str, persist: bool) -> Record:
        _check_claim_id(claim_id)
        _, answer = await self._do("POST", _core.approval_path(event_id, "/claim"),
                                   _core.encode({"claim_id": claim_id}), accepted_is_transient=True, persist=persist)
        return _record_of(answer)

    async def report(self, event_id: str, outcome: Outcome, *, command_id: Optional[str] = None) -> Record:
        """See :meth:`countersign.Client.report`."""
        body = _core.outcome_body(outcome, command_id or new_report_id())
        _, answer = await self._do("POST", _core.approval_path(event_id, "/outcome"), body,
                                   accepted_is_transient=True)
        return _record_of(answer)

    async def ask(self, run: Run, question: "str | Question", *, id: Optional[str] = None,
                  wait: Optional[float] = None) -> Answer:
        """See :meth:`countersign.Client.ask`; a cancelled task cancels the question, as in :meth:`review`."""
        payload = _core.question_body(run, question, id)
        deadline = _deadline(wait)
        watch = wait != 0 and self._cancel_on_abort is not None
        first = watch
        opened: List[str] = []
        learning: "Optional[asyncio.Future[Tuple[int, Any]]]" = None
        try:
            while True:
                left = min(_left(deadline), self._s.poll_wait)
                path = "/v1/questions" + (f"?{_core.wait_param(left)}" if left > 0 and not first else "")
                if first:
                    learning = asyncio.ensure_future(self._do("POST", path, payload, persist=True,
                                                              retry_until=deadline))
                    _, answer = await asyncio.shield(learning)
                    learning = None
                else:
                    _, answer = await self._do("POST", path, payload, waits=left, persist=wait != 0,
                                               retry_until=deadline)
                first = False
                a = Answer.from_json(answer if isinstance(answer, dict) else {})
                opened = _pending_question(answer)
                if a.status != "pending" or _left(deadline) <= 0:
                    return a
                if not id and a.event_id:
                    rec, _ = await self.approval(a.event_id, wait=None if deadline is None else _left(deadline))
                    return Answer.from_record(rec) if rec.get("status") != "pending" else a
        except asyncio.CancelledError:
            if watch:
                await self._abandon(opened, learning, _pending_question)
            raise

    async def _abandon(self, opened: List[str], learning: "Optional[asyncio.Future[Tuple[int, Any]]]",
                       ids_of: Callable[[Any], List[str]]) -> None:
        """Cancels the approvals a cancelled wait was waiting on: those of ``opened``, or those the answer
        of ``learning`` (a request still on its way) names. Shielded from a second cancellation and bounded
        by cancel_on_abort; what fails is logged."""
        within = self._cancel_on_abort or 0
        until = time.monotonic() + within

        async def work() -> None:
            ids = opened
            if learning is not None:
                _, answer = await learning
                ids = ids_of(answer)
            for event_id in ids:
                try:
                    await self._cancel(event_id, _core.aborted_reason("its task was cancelled"), until)
                except Closed:
                    pass  # decided meanwhile: nothing to cancel
                except CountersignError as e:
                    _log.warning("countersign: could not cancel approval %s after an abort: %s", event_id, e)

        async def bounded() -> None:
            try:
                await asyncio.wait_for(work(), within)
            except asyncio.TimeoutError:
                _log.warning("countersign: gave up cancelling the approvals of a cancelled wait after %s s", within)
            except Exception as e:  # the first answer never came, or was not one
                _log.warning("countersign: could not learn which approvals a cancelled wait opened: %s", e)

        job = asyncio.ensure_future(bounded())
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            pass  # cancelled again: the job goes on, bounded; the first cancellation is re-raised

    async def approval(self, event_id: str, *, wait: Optional[float] = 0) -> Tuple[Record, int]:
        """See :meth:`countersign.Client.approval`."""
        deadline = _deadline(wait)
        while True:
            left = min(_left(deadline), self._s.poll_wait)
            path = _core.approval_path(event_id) + (f"?{_core.wait_param(left)}" if left > 0 else "")
            _, answer = await self._do("GET", path, None, waits=left, persist=wait != 0, retry_until=deadline)
            rec = _record_of(answer)
            rev = answer.get("revision", 0) if isinstance(answer, dict) else 0
            if rec.get("status") != "pending" or _left(deadline) <= 0:
                return rec, rev if isinstance(rev, int) else 0

    async def vote(self, event_id: str, decision: str, *, comment: Optional[str] = None,
                   arguments: Optional[Mapping[str, Any]] = None, arguments_sha256: Optional[str] = None,
                   answer: Optional[Mapping[str, Any]] = None, vote_id: Optional[str] = None) -> Record:
        """See :meth:`countersign.Client.vote`."""
        payload = _core.vote_body(decision, vote_id or new_vote_id(), comment, arguments, arguments_sha256, answer)
        status, ans = await self._do("POST", _core.approval_path(event_id, "/votes"), payload)
        if status == 202:
            raise InFlight()
        return _record_of(ans)

    async def approve(self, event_id: str, comment: Optional[str] = None) -> Record:
        return await self.vote(event_id, "approve", comment=comment)

    async def reject(self, event_id: str, reason: str) -> Record:
        return await self.vote(event_id, "reject", comment=reason)

    async def edit(self, event_id: str, arguments: Mapping[str, Any], comment: Optional[str] = None) -> Record:
        return await self.vote(event_id, "edit", arguments=arguments, comment=comment)

    async def cancel(self, event_id: str, reason: Optional[str] = None) -> Optional[Record]:
        """See :meth:`countersign.Client.cancel`."""
        return await self._cancel(event_id, reason, None)

    async def _cancel(self, event_id: str, reason: Optional[str], until: Optional[float]) -> Optional[Record]:
        status, ans = await self._do("POST", _core.approval_path(event_id, "/cancel"), _core.cancel_body(reason),
                                     until=until)
        return None if status == 202 else _record_of(ans)

    def events(self, *, last_event_id: Optional[str] = None) -> AsyncEventStream:
        """See :class:`countersign.EventStream`; iterate with ``async for``."""
        return AsyncEventStream(self, last_event_id)

    def decisions(self, *, watch: Optional[Collection[str]] = None,
                  last_event_id: Optional[str] = None) -> AsyncDecisionStream:
        """See :class:`countersign.DecisionStream`; iterate with ``async for``."""
        return AsyncDecisionStream(self, watch, last_event_id)

    # --- transport ------------------------------------------------------

    async def _open(self, method: str, path: str, payload: Optional[bytes], h: Dict[str, str]
                    ) -> Tuple[int, Dict[str, str], asyncio.StreamReader, asyncio.StreamWriter]:
        """Sends one request and reads the answer's head."""
        ep = self._s.endpoint
        tls = (self._ssl or ssl.create_default_context()) if ep.scheme == "https" else None
        reader, writer = await asyncio.open_connection(ep.host, ep.port, ssl=tls,
                                                       server_hostname=ep.host if tls else None, limit=_LINE_LIMIT)
        try:
            lines = [f"{method} {ep.base_path}{path} HTTP/1.1", f"Host: {ep.host_header}", "Connection: close"]
            lines += [f"{k}: {v}" for k, v in h.items()]
            if payload is not None:
                lines.append(f"Content-Length: {len(payload)}")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (payload or b""))
            await writer.drain()
            while True:
                status_line = (await reader.readline()).decode("latin-1")
                parts = status_line.split(None, 2)
                if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                    raise NetworkError(f"{method} {path}: not an HTTP answer: {status_line[:80]!r}")
                status = int(parts[1])
                hdrs: Dict[str, str] = {}
                while True:
                    line = (await reader.readline()).decode("latin-1")
                    if not line.endswith("\n"):
                        raise NetworkError(f"{method} {path}: the answer's head was cut off")
                    line = line.rstrip("\r\n")
                    if not line:
                        break
                    k, _, v = line.partition(":")
                    k = k.strip().lower()
                    hdrs[k] = f"{hdrs[k]}, {v.strip()}" if k in hdrs else v.strip()
                if status >= 200 or status == 101:
                    return status, hdrs, reader, writer
        except BaseException:
            writer.close()
            raise

    async def _once(self, method: str, path: str, payload: Optional[bytes], timeout: float) -> Tuple[int, bytes]:
        async def exchange() -> Tuple[int, bytes]:
            status, hdrs, reader, writer = await self._open(method, path, payload,
                                                            _core.headers(self._s, payload is not None))
            try:
                chunks: List[bytes] = []
                size = 0
                async for chunk in _body(reader, hdrs):
                    size += len(chunk)
                    if size > _core.MAX_ANSWER:
                        raise CountersignError(codes.BAD_ANSWER,
                                               f"{method} {path}: the answer is larger than 64 MiB")
                    chunks.append(chunk)
                return status, b"".join(chunks)
            finally:
                writer.close()

        try:
            return await asyncio.wait_for(exchange(), timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                asyncio.TimeoutError) as e:
            raise NetworkError(f"{method} {path}: {type(e).__name__}: {e}") from e

    async def _do(self, method: str, path: str, payload: Optional[bytes], *, waits: float = 0,
                  accepted_is_transient: bool = False, until: Optional[float] = None, persist: bool = False,
                  retry_until: Optional[float] = None) -> Tuple[int, Any]:
        """As Client._do."""
        backoff = _core.Backoff(self._s, until if not persist else _min(until, retry_until), persist)
        while True:
            err: Optional[CountersignError] = None
            try:
                status, data = await self._once(method, path, payload, _core.request_timeout(self._s, waits, until))
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
            await asyncio.sleep(delay)


def _pending_question(answer: Any) -> List[str]:
    """The question's event id while it is pending."""
    a = Answer.from_json(answer if isinstance(answer, dict) else {})
    return [a.event_id] if a.status == "pending" and a.event_id else []


async def _body(reader: asyncio.StreamReader, hdrs: Dict[str, str]) -> AsyncIterator[bytes]:
    """The answer's body, chunk by chunk (chunked, sized or until the connection closes)."""
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readline()
            if not size_line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(size_line, None)
            size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
            if size == 0:
                while (await reader.readline()).strip():  # trailers
                    pass
                return
            while size > 0:
                chunk = await reader.read(min(size, 1 << 16))
                if not chunk:
                    raise asyncio.IncompleteReadError(b"", size)
                size -= len(chunk)
                yield chunk
            await reader.readexactly(2)
    elif "content-length" in hdrs:
        left = int(hdrs["content-length"])
        while left > 0:
            chunk = await reader.read(min(left, 1 << 16))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(chunk)
            yield chunk
    else:
        while chunk := await reader.read(1 << 16):
            yield chunk


class AsyncEventStream:
    """The asyncio form of :class:`countersign.EventStream`: ``async with``, ``async for``."""

    def __init__(self, client: AsyncClient, last_event_id: Optional[str] = None, on_connect: Any = None) -> None:
        self._c = client
        self._parser = _core.SSEParser()
        self._parser.last_event_id = last_event_id or ""
        self._on_connect = on_connect
        self._writer: Optional[asyncio.StreamWriter] = None
        self._lines: Optional[AsyncIterator[bytes]] = None
        self._closed = False
        self.connects = 0

    @property
    def last_event_id(self) -> str:
        return self._parser.last_event_id

    async def open(self) -> AsyncEventStream:
        if self._lines is None:
            await self._connect()
        return self

    async def close(self) -> None:
        self._closed = True
        self._drop()

    async def __aenter__(self) -> AsyncEventStream:
        return await self.open()

    async def __aexit__(self, t: Optional[Type[BaseException]], e: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> Event:
        while True:
            ev = await self._step()
            if ev is not None:
                return ev

    async def _step(self) -> Optional[Event]:
        """See EventStream._step."""
        if self._closed:
            raise StopAsyncIteration
        if self._lines is None:
            await self._connect()
            return None
        while True:
            try:
                line = await asyncio.wait_for(self._lines.__anext__(), _core.HEARTBEAT_TIMEOUT)
            except (StopAsyncIteration, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ValueError, asyncio.TimeoutError):
                self._drop()
                return None
            ev = self._parser.feed(line.decode("utf-8", "replace"))
            if ev is not None:
                return ev

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer, self._lines = None, None

    async def _connect(self) -> None:
        c = self._c
        backoff = _core.Backoff(c._s)
        if self._parser.retry is not None:
            await asyncio.sleep(min(self._parser.retry, c._s.max_backoff))
        while True:
            err: CountersignError
            h = _core.headers(c._s, False, accept="text/event-stream")
            if self._parser.last_event_id:
                h["Last-Event-ID"] = self._parser.last_event_id
            try:
                status, hdrs, reader, writer = await asyncio.wait_for(
                    c._open("GET", "/v1/events", None, h), c._s.timeout)
                if status == 200:
                    self._writer, self._lines = writer, _lines(_body(reader, hdrs))
                    self.connects += 1
                    if self._on_connect is not None:
                        await self._on_connect()
                    return
                try:
                    data = b"".join([c async for c in _body(reader, hdrs)])
                finally:
                    writer.close()
                try:
                    _core.decode_answer(status, data)
                    err = CountersignError(codes.BAD_ANSWER, f"GET /v1/events answered {status}", status=status)
                except CountersignError as e:
                    if not _core.transient(e):
                        raise
                    err = e
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                    asyncio.TimeoutError) as e:
                self._drop()
                err = NetworkError(f"GET /v1/events: {type(e).__name__}: {e}")
            delay = backoff.next()
            if delay is None:
                raise err
            await asyncio.sleep(delay)


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    buf = b""
    async for chunk in chunks:
        buf += chunk
        while (i := buf.find(b"\n")) >= 0:
            yield buf[: i + 1]
            buf = buf[i + 1:]
        if len(buf) > _LINE_LIMIT:
            raise ValueError("an event line is longer than 4 MiB")


class AsyncDecisionStream:
    """The asyncio form of :class:`countersign.DecisionStream`."""

    def __init__(self, client: AsyncClient, watch: Optional[Collection[str]] = None,
                 last_event_id: Optional[str] = None) -> None:
        self._c = client
        self.watch = watch if watch is not None else set()
        self._ready: Deque[Decision] = collections.deque()
        self._seen: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self.events = AsyncEventStream(client, last_event_id, on_connect=self._reread)

    async def _reread(self) -> None:
        for event_id in list(self.watch):
            try:
                rec, rev = await self._c.approval(event_id)
            except NotFound:
                continue
            if rec.get("status") not in (None, "", "pending"):
                self._ready.append(Decision.from_record(rec, rev))

    async def open(self) -> AsyncDecisionStream:
        await self.events.open()
        return self

    async def close(self) -> None:
        await self.events.close()

    async def __aenter__(self) -> AsyncDecisionStream:
        return await self.open()

    async def __aexit__(self, t: Optional[Type[BaseException]], e: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()

    def __aiter__(self) -> AsyncDecisionStream:
        return self

    async def __anext__(self) -> Decision:
        while True:
            if self._ready:
                d = self._ready.popleft()
            else:
                ev = await self.events._step()
                if ev is None or ev.kind != "decided" or not isinstance(ev.data, dict):
                    continue
                d = Decision.from_json(ev.data)
            if _first(self._seen, d.event_id):
                return d


