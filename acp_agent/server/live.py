"""The ACP sessions open on one connection, and each one's client proxy.

It owns the map from ``sessionId`` to the live :class:`~acp_agent.session.Session` and
its :class:`~acp_agent.client.SessionClient` (made at its first use: an idle session has
none), what the store keeps of a live session (:meth:`OpenSessions.record`), and the
connection those clients send on (bound when serving starts). It does not create, restore
or close sessions (:mod:`.lifecycle`) or run turns (:mod:`.turns`).
"""

from __future__ import annotations

from ..agent import Agent
from ..client import SessionClient
from ..connection import AgentSession
from ..session import Session
from ..store import SessionRecord
from .handshake import Handshake
from .params import not_found


class OpenSessions:
    """Session id -> live session and client, for one connection and one principal."""

    __slots__ = ("_allow_outside_roots", "_conn", "_handshake", "clients", "owner", "sessions")

    def __init__(self, handshake: Handshake, *, owner: str, allow_outside_roots: bool) -> None:
        self._handshake = handshake
        #: the principal whose sessions this connection sees
        self.owner = owner
        self._allow_outside_roots = allow_outside_roots
        self.sessions: dict[str, Session] = {}
        self.clients: dict[str, SessionClient] = {}
        self._conn: AgentSession | None = None

    def bind(self, conn: AgentSession) -> None:
        """The connection the sessions' clients send on (set once serving starts)."""
        self._conn = conn

    @property
    def connection(self) -> AgentSession:
        if self._conn is None:
            raise RuntimeError("the server is not serving")
        return self._conn

    def get(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)

    def live(self, session_id: str) -> Session:
        """The live session, or ``ResourceNotFound``."""
        session = self.sessions.get(session_id)
        if session is None:
            raise not_found(session_id, "is not open on this connection")
        return session

    def client(self, session: Session) -> SessionClient:
        """The live session's client, made at its first use; ``KeyError`` for a session
        that is not the one attached under its id."""
        session_id = session.session_id
        client = self.clients.get(session_id)
        if client is None:
            if self.sessions.get(session_id) is not session:
                raise KeyError(session_id)
            client = self.clients[session_id] = SessionClient(
                session,
                self.connection,
                self._handshake.capabilities,
                allow_outside_roots=self._allow_outside_roots,
            )
        return client

    def attach(self, session: Session) -> None:
        self.sessions[session.session_id] = session

    def detach(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)
        self.clients.pop(session_id, None)

    def record(self, session: Session) -> SessionRecord:
        """What the store keeps of a live session."""
        return SessionRecord(
            session_id=session.session_id,
            cwd=session.cwd,
            owner=self.owner,
            additional_directories=session.additional_directories,
            title=session.title,
            mode_id=session.mode_id,
            config=dict(session.config),
        )

    async def announce_commands(self, agent: Agent, session: Session) -> None:
        commands = list(agent.commands(session))
        if commands and session.session_id in self.sessions:
            await self.client(session).available_commands(list(map(dict, commands)))
