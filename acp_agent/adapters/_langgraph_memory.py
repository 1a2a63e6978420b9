"""What a LangGraph turn saves with the session, and the thread its saved turns fold into.

Owns the format of a turn's saved memory for the LangGraph adapter: :func:`changes`, what
a turn changed in its thread (the checkpointer's export,
:meth:`~acp_agent.adapters._langgraph_runtime.SessionCheckpointer.export_thread`), and
:func:`fold`, the thread its session's saved turns make, oldest first, so that what each
turn saves does not grow with the session's length. A turn saves::

    {"changed": {namespace: {field: value, ...,
                             "values": [[channel, value], ...], "cleared": [channel, ...]}},
     "gone": [namespace, ...]}

where a namespace lists only the fields of its export that changed (its checkpoint, ids,
metadata and pending writes, whole) and the channels whose value changed: a list that
extends the previous one (compared on its serialized entries) as ``{"append": [...]}``,
any other value whole; ``cleared`` names the channels that no longer have a value. A
turn saved before turns saved their changes holds its whole thread, which replaces the
thread folded so far.

It works on JSON only: it imports no LangGraph and never deserializes a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

JSON = dict[str, Any]

__all__ = ["changes", "fold"]

#: the key of a turn that saved its changes (a whole thread has namespaces as keys)
CHANGED: Final = "changed"
VALUES: Final = "values"
CLEARED: Final = "cleared"
ENTRIES: Final = "entries"
APPEND: Final = "append"


def changes(base: JSON | None, thread: JSON) -> JSON:
    """What ``thread`` changed from ``base`` (the thread the turn was restored from)."""
    before = base or {}
    changed: JSON = {}
    for ns, now in thread.items():
        was: Mapping[str, Any] = before.get(ns) or {}
        delta = {k: v for k, v in now.items() if k != VALUES and was.get(k) != v}
        old, new = _values(was), _values(now)
        values = [
            [channel, _value_change(old.get(channel), value)]
            for channel, value in new.items()
            if old.get(channel) != value
        ]
        if values:
            delta[VALUES] = values
        cleared = [channel for channel in old if channel not in new]
        if cleared:
            delta[CLEARED] = cleared
        if delta:
            changed[ns] = delta
    saved: JSON = {CHANGED: changed}
    gone = [ns for ns in before if ns not in thread]
    if gone:
        saved["gone"] = gone
    return saved


def fold(saved: Sequence[Any]) -> JSON | None:
    """The thread the saved turns make, oldest first (None: no turn saved one)."""
    thread: dict[str, JSON] | None = None
    for turn in saved:
        if not isinstance(turn, Mapping):
            continue
        if CHANGED not in turn:  # a whole thread
            thread = {str(ns): _owned(latest) for ns, latest in turn.items()}
            continue
        thread = thread if thread is not None else {}
        for ns in turn.get("gone", ()):
            thread.pop(ns, None)
        for ns, delta in turn[CHANGED].items():
            _apply(thread.setdefault(ns, {}), delta)
    if thread is None:
        return None
    return {ns: _exported(latest) for ns, latest in thread.items()}


def _values(latest: Mapping[str, Any]) -> dict[str, Any]:
    return {str(channel): value for channel, value in latest.get(VALUES, ())}


def _value_change(old: Any, new: Any) -> Any:
    """``new`` as saved: only its appended entries where it extends ``old``."""
    if _is_list(old) and _is_list(new):
        kept = old[ENTRIES]
        if new[ENTRIES][: len(kept)] == kept:
            return {APPEND: new[ENTRIES][len(kept) :]}
    return new


def _is_list(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get(ENTRIES), list)


def _owned(latest: Mapping[str, Any]) -> JSON:
    """A namespace of a saved whole thread, with its values by channel, in lists of our own
    (a saved turn is never changed). One saved before values were kept apart has none."""
    owned = {k: v for k, v in latest.items() if k != VALUES}
    if VALUES in latest:
        owned[VALUES] = {
            channel: {ENTRIES: list(value[ENTRIES])} if _is_list(value) else value
            for channel, value in _values(latest).items()
        }
    return owned


def _apply(latest: JSON, delta: Mapping[str, Any]) -> None:
    for key, value in delta.items():
        if key not in (VALUES, CLEARED):
            latest[key] = value
    values: dict[str, Any] = latest.setdefault(VALUES, {})
    for channel in delta.get(CLEARED, ()):
        values.pop(channel, None)
    for channel, value in delta.get(VALUES, ()):
        if isinstance(value, Mapping) and APPEND in value:
            values[channel][ENTRIES].extend(value[APPEND])
        elif _is_list(value):
            values[channel] = {ENTRIES: list(value[ENTRIES])}
        else:
            values[channel] = value


def _exported(latest: JSON) -> JSON:
    """A folded namespace in the checkpointer's export form."""
    exported = {k: v for k, v in latest.items() if k != VALUES}
    if VALUES in latest:
        exported[VALUES] = [[channel, value] for channel, value in latest[VALUES].items()]
    return exported
