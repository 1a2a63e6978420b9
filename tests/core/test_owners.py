"""SessionOwners: one claim per session, released only by its holder."""

from __future__ import annotations

from acp_agent.server.owners import SessionOwners


class Conn:
    async def give_up(self, session_id: str) -> None:
        raise AssertionError("not called by the registry itself")


def test_a_claim_returns_the_other_owner_and_a_release_is_compare_and_set() -> None:
    owners = SessionOwners()
    a, b = Conn(), Conn()
    assert owners.claim("s", a) is None
    assert owners.claim("s", a) is None  # its own claim again
    assert owners.claim("s", b) is a
    owners.release("s", a)  # a lost it already: nothing changes
    assert owners.holder("s") is b
    owners.release("s", b)
    assert owners.holder("s") is None
