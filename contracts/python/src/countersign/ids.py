"""Identifiers: claim and vote ids, and the event id of a tool call."""

from __future__ import annotations

import secrets
import uuid
from typing import Mapping

# The namespace of event ids (DESIGN §2).
EVENT_ID_NAMESPACE = uuid.UUID("886a1d92-e7fc-5f25-afdd-55b3e40e8255")


def new_claim_id() -> str:
    """A fresh claim id. Keep it with the run (across a restart of this
    process, too) to retry a claim whose answer was lost: the same id is
    recognized as the same claim."""
    return "claim-" + secrets.token_hex(16)


def new_report_id() -> str:
    """A fresh id for an outcome report (``Client.report``'s ``command_id``): a report sent again
    with it is the same report."""
    return "outcome-" + secrets.token_hex(16)


def new_vote_id() -> str:
    """A fresh vote id: a vote sent again with it is counted once."""
    return "vote-" + secrets.token_hex(16)


def event_id_for(run: Mapping[str, object], tool_call_id: str) -> str:
    """The event id Countersign gives the tool call ``tool_call_id`` of ``run``
    (UUIDv5 over tenant, agent, run id and tool call id). Empty when the run
    or the call has no id: the server then makes a random one."""
    run_id = run.get("id")
    if not run_id or not tool_call_id:
        return ""
    name = "\n".join(str(run.get(k) or "") for k in ("tenant", "agent", "id")) + "\n" + tool_call_id
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, name))
