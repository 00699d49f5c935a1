"""``@gated``: put any tool function behind Countersign.

A gated call goes review → wait → claim → call: the function runs only
after the policy allows the call or a human approves it, with the approved
(possibly edited) arguments, and at most once per approval across every
process that runs it. A call that may not run returns a :class:`Denied`
(or raises :class:`CallDenied`) whose text is meant for the model.

After the function of a claimed call returns or raises, the outcome is
reported (``Client.report``): ``succeeded``, or ``failed`` with the
exception's message. The report never changes what the function returned
or raised: one that fails is logged on the ``countersign`` logger.

While the function runs, :func:`current_receipt` returns the call's
receipt (the claim's, or the API's for a grant or a ``receipt: true``
rule) and :func:`receipt_headers` the header that carries it, for a tool
that verifies receipts.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import inspect
import json
import logging
from dataclasses import dataclass
from typing import (Any, Awaitable, Callable, Coroutine, Dict, Generic, Mapping, Optional, ParamSpec, TypeVar, Union,
                    cast, overload)

from .aio import AsyncClient
from .client import Abort, Client
from .errors import AlreadyClaimed, ApprovalLapsed, InvalidToolCall, NotApproved
from . import _core
from .ids import new_claim_id, new_report_id
from .toolcalls import ToolCallLike, to_tool_call
from .types import JSONObject, Outcome, Record, Result, Run, ToolCall

P = ParamSpec("P")
R = TypeVar("R")

RunSource = Union[Run, Callable[[], Run]]
"""The run of a gated call: a Run, or a function that returns the current one."""

_MESSAGES = {
    "denied": "A human or the policy denied this call. It did not run.",
    "responded": "A human answered instead of approving. The call did not run.",
    "expired": "No one approved this call in time, or it was approved but not run in time. It did not run.",
    "cancelled": "This call was cancelled. It did not run.",
    "already_executed": ("This approved call was already claimed; Countersign does not know whether the tool "
                         "then ran. It will not run again."),
    "pending": "This call is still waiting for a human's approval. It has not run.",
}


@dataclass(frozen=True)
class Denied:
    """A gated call that did not run. ``str(denied)`` is the message for the model."""

    verdict: str
    """denied, responded, expired, cancelled, already_executed, or pending (a bounded wait ran out)."""
    reason: str
    tool_name: str = ""
    tool_call_id: str = ""
    event_id: str = ""
    rule: str = ""
    code: str = ""
    """As :attr:`Result.code`: ``approval_lapsed`` for an approval that lapsed before its claim."""

    def __str__(self) -> str:
        return self.reason or _MESSAGES.get(self.verdict, f"The call did not run ({self.verdict}).")


class CallDenied(Exception):
    """Raised instead of returning :class:`Denied` with ``raise_on_deny=True``."""

    def __init__(self, denied: Denied) -> None:
        self.denied = denied
        super().__init__(str(denied))

    @property
    def reason(self) -> str:
        return str(self.denied)


def _denied(res: Result, name: str) -> Denied:
    return Denied(verdict=res.verdict, reason=res.reason, tool_name=name, tool_call_id=res.tool_call_id,
                  event_id=res.event_id, rule=res.rule, code=res.code)


def _lapsed(res: Result) -> Result:
    """The result of an allowed call whose claim found the approval lapsed."""
    return Result(res.tool_call_id, "expired", res.event_id,
                  "This call was approved, but not run in time: the approval lapsed and the call was not run. "
                  "Propose it again for a new decision.", res.rule, code="approval_lapsed")


_log = logging.getLogger("countersign")


def _outcome_of(err: Optional[BaseException]) -> Outcome:
    if err is None:
        return {"status": "succeeded"}
    return {"status": "failed", "summary": _core.error_text(err)}


def _report_failed(event_id: str, e: Exception) -> None:
    _log.warning("countersign: could not report the outcome of approval %s: %s", event_id, e)


_receipt: "contextvars.ContextVar[str]" = contextvars.ContextVar("countersign_receipt", default="")


def current_receipt() -> str:
    """The receipt of the gated call whose function is running (in this thread or task): a compact JWS
    to hand the tool, which verifies it (``countersign.receipts.verify_receipt``). ``""`` outside a gated
    function, or when Countersign signed none (no receipt key; a call the policy allows without one)."""
    return _receipt.get()


def receipt_headers() -> Dict[str, str]:
    """``{"Countersign-Receipt": current_receipt()}``, or ``{}`` without a receipt: the header of a request
    to a tool that verifies receipts, e.g. ``urllib.request.Request(url, data, headers=receipt_headers())``."""
    r = _receipt.get()
    return {"Countersign-Receipt": r} if r else {}


def _claimed_receipt(rec: Mapping[str, Any], res: Result) -> str:
    claim = rec.get("claim")
    r = claim.get("receipt") if isinstance(claim, dict) else None
    return r if isinstance(r, str) and r else res.receipt


def _call_id(name: str, args: JSONObject) -> str:
    canon = json.dumps([name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "call-" + hashlib.sha256(canon.encode()).hexdigest()[:32]


class _Base(Generic[P, R]):
    def __init__(self, fn: Callable[..., Any], run: RunSource, name: Optional[str], tool_schema: Optional[JSONObject],
                 wait: Optional[float], raise_on_deny: bool) -> None:
        self.__wrapped__ = fn
        self.name = name or fn.__name__
        self.tool_schema = tool_schema
        self._fn = fn
        self._sig = inspect.signature(fn)
        self._run = run
        self._wait = wait
        self._raise = raise_on_deny
        functools.update_wrapper(self, fn)

    def _current_run(self) -> Run:
        return self._run() if callable(self._run) else self._run

    def _direct(self, args: Any, kwargs: Any) -> ToolCall:
        """A direct call as a tool call: its arguments by name, its id derived
        from the tool's name and arguments (so a re-run re-attaches)."""
        bound = self._sig.bind(*args, **kwargs)
        arguments = dict(bound.arguments)
        for p in self._sig.parameters.values():
            if p.kind is inspect.Parameter.VAR_KEYWORD and p.name in arguments:
                arguments.update(arguments.pop(p.name))
            elif p.kind is inspect.Parameter.VAR_POSITIONAL and p.name in arguments:
                raise TypeError(f"{self.name}: a gated tool cannot take *{p.name}")
        try:
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{self.name}: the arguments of a gated tool must be JSON: {e}") from None
        return self._call({"name": self.name, "arguments": arguments})

    def _call(self, tc: ToolCall) -> ToolCall:
        if self.tool_schema is not None:
            tc["tool_schema"] = self.tool_schema
        if "id" not in tc:
            tc["id"] = _call_id(tc["name"], tc.get("arguments", {}))
        return tc

    def _from_model(self, call: ToolCallLike) -> ToolCall:
        tc = to_tool_call(call)
        if tc["name"] != self.name:
            raise InvalidToolCall(f"the tool call is for {tc['name']!r}, not {self.name!r}", "name")
        return self._call(tc)

    def _check(self, args: Mapping[str, Any]) -> None:
        # Fail before the claim: an approval that cannot be called stays unused.
        try:
            self._sig.bind(**args)
        except TypeError as e:
            raise TypeError(f"{self.name}: the approved arguments do not fit the function: {e}") from None

    def _deny(self, res: Result) -> Denied:
        d = _denied(res, self.name)
        if self._raise:
            raise CallDenied(d)
        return d


class GatedTool(_Base[P, R]):
    """A gated sync tool. Call it like the function, or :meth:`invoke` it with
    the model's tool call. Returns the function's result, or :class:`Denied`."""

    def __init__(self, client: Client, fn: Callable[P, R], run: RunSource, name: Optional[str],
                 tool_schema: Optional[JSONObject], wait: Optional[float], raise_on_deny: bool) -> None:
        super().__init__(fn, run, name, tool_schema, wait, raise_on_deny)
        self._client = client

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Union[R, Denied]:
        return self._gate(self._direct(args, kwargs))

    def tool_call(self, *args: P.args, **kwargs: P.kwargs) -> ToolCall:
        """The tool call a direct call with these arguments submits (its id
        gives the event id: ``event_id_for(run, tool_call["id"])``)."""
        return self._direct(args, kwargs)

    def invoke(self, tool_call: ToolCallLike, *, abort: Optional[Abort] = None) -> Union[R, Denied]:
        """Runs the model's tool call (OpenAI, Anthropic or Countersign shape).

        ``abort`` set from another thread while the call waits for a human
        cancels its approval and raises :class:`Aborted`."""
        return self._gate(self._from_model(tool_call), abort)

    def _gate(self, tc: ToolCall, abort: Optional[Abort] = None) -> Union[R, Denied]:
        (res,) = self._client.review(self._current_run(), [tc], wait=self._wait, abort=abort)
        if not res.allowed:
            return self._deny(res)
        args = res.arguments if res.arguments is not None else tc.get("arguments", {})
        self._check(args)
        receipt = res.receipt
        if res.event_id:
            try:
                # Retried until it succeeds or is refused, with one claim id: as the wait, it outlives
                # restarts of the server.
                receipt = _claimed_receipt(self._client._claim(res.event_id, new_claim_id(), True), res)
            except AlreadyClaimed:
                return self._deny(Result(res.tool_call_id, "already_executed", res.event_id, "", res.rule))
            except NotApproved as e:
                return self._deny(Result(res.tool_call_id, "denied", res.event_id, e.message, res.rule))
            except ApprovalLapsed:
                return self._deny(_lapsed(res))
        token = _receipt.set(receipt)
        try:
            out = cast(R, self._fn(**args))
        except Exception as e:
            self._report(res.event_id, e)
            raise
        finally:
            _receipt.reset(token)
        self._report(res.event_id, None)
        return out

    def _report(self, event_id: str, err: Optional[BaseException]) -> None:
        """Reports how the function of the claimed call event_id ended; it never raises."""
        if not event_id:
            return
        try:
            self._client.report(event_id, _outcome_of(err), command_id=new_report_id())
        except Exception as e:
            _report_failed(event_id, e)


class AsyncGatedTool(_Base[P, R]):
    """A gated async tool: as :class:`GatedTool`, awaited."""

    def __init__(self, client: Union[AsyncClient, Client], fn: Callable[P, Awaitable[R]], run: RunSource,
                 name: Optional[str], tool_schema: Optional[JSONObject], wait: Optional[float],
                 raise_on_deny: bool) -> None:
        super().__init__(fn, run, name, tool_schema, wait, raise_on_deny)
        self._client = client

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Union[R, Denied]:
        return await self._gate(self._direct(args, kwargs))

    def tool_call(self, *args: P.args, **kwargs: P.kwargs) -> ToolCall:
        """See :meth:`GatedTool.tool_call`."""
        return self._direct(args, kwargs)

    async def invoke(self, tool_call: ToolCallLike) -> Union[R, Denied]:
        return await self._gate(self._from_model(tool_call))

    async def _review(self, tc: ToolCall) -> Result:
        c = self._client
        if isinstance(c, AsyncClient):
            (res,) = await c.review(self._current_run(), [tc], wait=self._wait)
            return res
        # The blocking client waits in a thread: a cancelled task aborts it,
        # and the thread cancels the approval before it ends.
        abort = Abort()
        waiting = asyncio.ensure_future(asyncio.to_thread(c.review, self._current_run(), [tc], wait=self._wait,
                                                          abort=abort))
        try:
            (res,) = await asyncio.shield(waiting)
        except asyncio.CancelledError:
            abort.abort("its task was cancelled")
            try:
                await asyncio.shield(waiting)  # the thread cancels the approval, within cancel_on_abort
            except Exception:  # Aborted, or whatever ended the review meanwhile: the task is cancelled
                pass
            raise
        return res

    async def _claim(self, event_id: str) -> Record:
        c = self._client
        if isinstance(c, AsyncClient):
            return await c._claim(event_id, new_claim_id(), True)
        return await asyncio.to_thread(c._claim, event_id, new_claim_id(), True)

    async def _gate(self, tc: ToolCall) -> Union[R, Denied]:
        res = await self._review(tc)
        if not res.allowed:
            return self._deny(res)
        args = res.arguments if res.arguments is not None else tc.get("arguments", {})
        self._check(args)
        receipt = res.receipt
        if res.event_id:
            try:
                receipt = _claimed_receipt(await self._claim(res.event_id), res)
            except AlreadyClaimed:
                return self._deny(Result(res.tool_call_id, "already_executed", res.event_id, "", res.rule))
            except NotApproved as e:
                return self._deny(Result(res.tool_call_id, "denied", res.event_id, e.message, res.rule))
            except ApprovalLapsed:
                return self._deny(_lapsed(res))
        token = _receipt.set(receipt)
        try:
            out = cast(R, await self._fn(**args))
        except Exception as e:
            await self._report(res.event_id, e)
            raise
        finally:
            _receipt.reset(token)
        await self._report(res.event_id, None)
        return out

    async def _report(self, event_id: str, err: Optional[BaseException]) -> None:
        """As GatedTool._report."""
        if not event_id:
            return
        c, outcome, command_id = self._client, _outcome_of(err), new_report_id()
        try:
            if isinstance(c, AsyncClient):
                await c.report(event_id, outcome, command_id=command_id)
            else:
                await asyncio.to_thread(c.report, event_id, outcome, command_id=command_id)
        except Exception as e:
            _report_failed(event_id, e)


class _Gate:
    def __init__(self, client: Union[Client, AsyncClient], run: RunSource, name: Optional[str],
                 tool_schema: Optional[JSONObject], wait: Optional[float], raise_on_deny: bool) -> None:
        self._args = (run, name, tool_schema, wait, raise_on_deny)
        self._client = client

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]]) -> AsyncGatedTool[P, R]: ...  # type: ignore[misc]

    @overload
    def __call__(self, fn: Callable[P, R]) -> GatedTool[P, R]: ...

    def __call__(self, fn: Callable[P, Any]) -> Union[GatedTool[P, Any], AsyncGatedTool[P, Any]]:
        if inspect.iscoroutinefunction(fn):
            return AsyncGatedTool(self._client, fn, *self._args)
        if not isinstance(self._client, Client):
            raise TypeError(f"@gated: {fn.__name__} is not async; gate it with a Client, not an AsyncClient")
        return GatedTool(self._client, fn, *self._args)


def gated(client: Union[Client, AsyncClient], *, run: RunSource, name: Optional[str] = None,
          tool_schema: Optional[Dict[str, Any]] = None, wait: Optional[float] = None,
          raise_on_deny: bool = False) -> _Gate:
    """Gates a tool function (sync or async) with Countersign.

    ``run`` is the run the calls belong to (or a function returning it, read
    at each call); ``name`` the tool's name for the policy (default: the
    function's name); ``tool_schema`` the JSON Schema a human's edit must
    satisfy; ``wait`` how long to wait for a decision (default: until there
    is one; a call still pending then returns ``Denied("pending")``).

    Calling the gated function directly identifies the call by its tool name
    and arguments within the run: calling it again with the same arguments
    in the same run re-attaches to the same approval (so after a crash it
    will not run twice). Use ``.invoke(tool_call)`` with the model's tool
    call to tell identical calls apart by the model's id.
    """
    return _Gate(client, run, name, tool_schema, wait, raise_on_deny)
