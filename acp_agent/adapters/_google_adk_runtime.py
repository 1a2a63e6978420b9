"""The Google ADK side of :mod:`acp_agent.adapters.google_adk`: imported only once an ADK
agent is adapted (it imports ``google.adk`` and ``google.genai``).

Owns :class:`StoredSessionService`, the ADK session service of one ACP session (ADK's
in-memory service, rebuilt from the events the session's turns saved, recording the events
a turn appends so that they are saved with its end), and the ADK values the adapter builds
(the user's message, a confirmation's answer, the response a cut call gets, the events
that tell a turn that ended with nothing saved: :func:`unfinished_events`).

It does not know ACP: what a turn sends is :mod:`acp_agent.adapters.google_adk`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

# LiteLLM fetches its model price list from the network on import unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from google.adk.events import Event
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from .unfinished import UnfinishedTurn

JSON = dict[str, Any]

#: the names ADK runs the session under (one ACP session is one ADK session)
APP: Final = "acp-agent"
USER: Final = "acp-user"
#: the author of the responses the adapter gives calls a cut turn left unanswered
AUTHOR: Final = "user"
#: the function call ADK asks a tool's confirmation with
CONFIRMATION: Final = "adk_request_confirmation"


class StoredSessionService(InMemorySessionService):
    """ADK's in-memory session service for one ACP session, whose events are kept with
    the session's turns: :meth:`turn_memory` is what a turn saves."""

    def __init__(self) -> None:
        super().__init__()
        self._added: list[JSON] = []
        self._recording = False

    @classmethod
    async def rebuilt(cls, session_id: str, memory: Sequence[Any]) -> tuple[Any, Any]:
        """The service and its session, with the events of the turns saved before."""
        service = cls()
        session = await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
        for saved_turn in memory:
            events = saved_turn.get("events") if isinstance(saved_turn, Mapping) else None
            for raw in events if isinstance(events, list) else ():
                await service.append_event(session, Event.model_validate(raw))
        service._recording = True
        return service, session

    async def append_event(self, session: Session, event: Event) -> Event:
        appended = await super().append_event(session=session, event=event)
        if self._recording and not event.partial:
            self._added.append(event.model_dump(mode="json", exclude_none=True, by_alias=True))
        return appended

    def turn_memory(self) -> JSON:
        """The events this turn appended, then start counting the next turn's."""
        memory: JSON = {"events": self._added}
        self._added = []
        return memory


def user_message(text: str) -> Any:
    return types.Content(role="user", parts=[types.Part(text=text)])


def confirmations(answers: Mapping[str, tuple[str, bool]]) -> Any:
    """The message answering confirmation calls: id -> (its name, confirmed)."""
    parts = [
        types.Part(
            function_response=types.FunctionResponse(
                id=call_id, name=name, response={"confirmed": confirmed}
            )
        )
        for call_id, (name, confirmed) in answers.items()
    ]
    return types.Content(role="user", parts=parts)


def unanswered(session: Any) -> list[tuple[str, str]]:
    """(id, name) of the model's function calls no function response answers."""
    asked: dict[str, str] = {}
    answered: set[str] = set()
    for event in session.events:
        for part in (event.content.parts or []) if event.content else []:
            call = part.function_call
            if call is not None and call.id and call.name != CONFIRMATION:
                asked[call.id] = call.name or ""
            if part.function_response is not None and part.function_response.id:
                answered.add(part.function_response.id)
    return [(i, n) for i, n in asked.items() if i not in answered]


async def answer_cut_calls(service: StoredSessionService, session: Any, output: str) -> None:
    """Give each call a cut turn left without a response ``output`` as its error."""
    left = unanswered(session)
    if not left:
        return
    parts = [
        types.Part(
            function_response=types.FunctionResponse(id=i, name=n, response={"error": output})
        )
        for i, n in left
    ]
    event = Event(author=AUTHOR, content=types.Content(role="user", parts=parts))
    await service.append_event(session, event)


def unfinished_events(turn: UnfinishedTurn, prompt: str, author: str) -> list[JSON]:
    """A turn that ended with nothing saved as ADK events (as a turn saves them): the
    user's ``prompt``, each response of the agent ``author`` (its text and function calls),
    and the calls' responses."""
    events = [Event(author=AUTHOR, content=user_message(prompt))]
    for response in turn.responses:
        parts = [types.Part(text=response.text)] if response.text else []
        parts += [
            types.Part(
                function_call=types.FunctionCall(id=c.call_id, name=c.name, args=c.arguments)
            )
            for c in response.calls
        ]
        if not parts:
            continue
        events.append(Event(author=author, content=types.Content(role="model", parts=parts)))
        if response.calls:
            answers = [
                types.Part(
                    function_response=types.FunctionResponse(
                        id=c.call_id,
                        name=c.name,
                        response={"error" if c.failed else "result": c.result},
                    )
                )
                for c in response.calls
            ]
            content = types.Content(role="user", parts=answers)
            events.append(Event(author=AUTHOR, content=content))
    return [e.model_dump(mode="json", exclude_none=True, by_alias=True) for e in events]
