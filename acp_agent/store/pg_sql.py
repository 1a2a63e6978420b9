"""The PostgreSQL store's schema, its versions and every SQL statement it runs.

This module owns text only: the tables, the ``acp_write_turn`` function (the fenced turn
write, one round trip, checked and applied inside the database), the schema version table
and the statements of ``acp_agent.store.postgres``. It runs nothing and imports nothing.

Text is compared byte by byte (``COLLATE "C"``), as Python compares strings, whatever the
database's locale. PostgreSQL text cannot hold NUL, so the store escapes text (see
``pg_rows.escape``) before it gets here. Every table name starts with ``acp_``,
unqualified: the connection's ``search_path`` (for example
``?options=-csearch_path%3Dmyschema`` in the URL) decides the schema.

Leases live on the session row: ``lease_holder`` (a store instance's id, ``NULL`` when
free), ``lease_expires`` (the database's clock) and ``lease_token``, the fencing token, which
only grows: it goes up by one whenever a holder other than the last one takes the lease.
A write names the token it holds and the database refuses it if the session's token moved on.
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = 2

#: serialises schema creation and migration across hosts (an arbitrary constant)
SCHEMA_LOCK: Final = 0x616370_5347  # "acpSG"

READ_VERSION: Final = """
SELECT version FROM acp_schema_version
"""

HAS_VERSION_TABLE: Final = """
SELECT to_regclass('acp_schema_version') IS NOT NULL
"""

# The write's status codes, as acp_write_turn returns them.
WRITE_OK: Final = 0
WRITE_NO_SESSION: Final = 1
WRITE_STALE_TOKEN: Final = 2
WRITE_TURN_RUNNING: Final = 3  # begun twice
WRITE_TURN_ENDED: Final = 4
WRITE_NO_TURN: Final = 5
WRITE_LOCKED: Final = 6  # BATCH_WRITE_TURN only: another transaction holds the session row

#: version -> the statements that bring the schema from the version before to it
MIGRATIONS: Final[dict[int, str]] = {
    1: """
CREATE TABLE acp_schema_version (version integer NOT NULL);
INSERT INTO acp_schema_version VALUES (0);

CREATE TABLE acp_sessions (
    session_id text COLLATE "C" PRIMARY KEY,
    owner text COLLATE "C" NOT NULL,
    cwd text COLLATE "C" NOT NULL,
    additional_directories text[] NOT NULL,
    title text,
    mode_id text,
    config text NOT NULL,
    created_at text NOT NULL,
    updated_at text COLLATE "C" NOT NULL,
    lease_holder text,
    lease_expires timestamptz,
    lease_token bigint NOT NULL DEFAULT 0
);
CREATE INDEX acp_sessions_listing ON acp_sessions (owner, updated_at DESC, session_id DESC);

CREATE TABLE acp_turns (
    session_id text NOT NULL REFERENCES acp_sessions ON DELETE CASCADE,
    seq integer NOT NULL,
    turn_id text NOT NULL,
    stop_reason text,
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, turn_id)
);

-- One row per write: the items it appended to the turn, in order.
CREATE TABLE acp_updates (
    session_id text NOT NULL,
    turn_seq integer NOT NULL,
    part integer NOT NULL,
    items text[] NOT NULL,
    PRIMARY KEY (session_id, turn_seq, part),
    FOREIGN KEY (session_id, turn_seq) REFERENCES acp_turns ON DELETE CASCADE
);

-- Prompts waiting for a busy session (--busy-policy queue): the turn each will run as,
-- the host that holds it and its session/prompt params. The write that begins the turn
-- removes it.
CREATE TABLE acp_prompt_queue (
    session_id text NOT NULL REFERENCES acp_sessions ON DELETE CASCADE,
    turn_id text NOT NULL,
    holder text NOT NULL,
    arrival bigint NOT NULL,
    request text NOT NULL,
    PRIMARY KEY (session_id, turn_id)
);
CREATE INDEX acp_prompt_queue_by_arrival ON acp_prompt_queue (session_id, arrival);

-- A turn write: refused (status > 0, nothing changed) unless the caller holds the
-- session's lease with the current token; else appends and ends as asked, bumps
-- updated_at and extends the lease.
CREATE FUNCTION acp_write_turn(
    p_session text, p_turn text, p_holder text, p_token bigint, p_ttl double precision,
    p_now text, p_begin boolean, p_items text[], p_end text
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
    v_token bigint;
    v_seq integer;
    v_stop text;
    v_part integer := 0;
BEGIN
    SELECT lease_holder, lease_token INTO v_holder, v_token
        FROM acp_sessions WHERE session_id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 1;
    END IF;
    IF v_holder IS DISTINCT FROM p_holder OR v_token <> p_token THEN
        RETURN 2;
    END IF;
    SELECT seq, stop_reason INTO v_seq, v_stop
        FROM acp_turns WHERE session_id = p_session AND turn_id = p_turn;
    IF p_begin THEN
        IF FOUND THEN
            RETURN CASE WHEN v_stop IS NULL THEN 3 ELSE 4 END;
        END IF;
        SELECT coalesce(max(seq) + 1, 0) INTO v_seq FROM acp_turns WHERE session_id = p_session;
        INSERT INTO acp_turns (session_id, seq, turn_id) VALUES (p_session, v_seq, p_turn);
        DELETE FROM acp_prompt_queue WHERE session_id = p_session AND turn_id = p_turn;
    ELSE
        IF NOT FOUND THEN
            RETURN 5;
        END IF;
        IF v_stop IS NOT NULL THEN
            RETURN 4;
        END IF;
        SELECT coalesce(max(part) + 1, 0) INTO v_part
            FROM acp_updates WHERE session_id = p_session AND turn_seq = v_seq;
    END IF;
    IF cardinality(p_items) > 0 THEN
        INSERT INTO acp_updates VALUES (p_session, v_seq, v_part, p_items);
    END IF;
    IF p_end IS NOT NULL THEN
        UPDATE acp_turns SET stop_reason = p_end WHERE session_id = p_session AND seq = v_seq;
    END IF;
    UPDATE acp_sessions
        SET updated_at = p_now,
            lease_expires = clock_timestamp() + make_interval(secs => p_ttl)
        WHERE session_id = p_session;
    RETURN 0;
END
$$;
""",
}

# Version 2: the same turn write in fewer statements: the turn is looked up first, the
# lease checked and the session touched by one UPDATE, a turn begun and ended at once
# inserted ended. (The turn lookup needs no lock: a write of another holder moves the token,
# so the UPDATE refuses this one.)
MIGRATIONS[2] = """
CREATE OR REPLACE FUNCTION acp_write_turn(
    p_session text, p_turn text, p_holder text, p_token bigint, p_ttl double precision,
    p_now text, p_begin boolean, p_items text[], p_end text
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_seq integer;
    v_stop text;
    v_found boolean;
    v_part integer := 0;
BEGIN
    SELECT seq, stop_reason INTO v_seq, v_stop
        FROM acp_turns WHERE session_id = p_session AND turn_id = p_turn;
    v_found := FOUND;
    IF p_begin AND v_found THEN
        RETURN CASE WHEN v_stop IS NULL THEN 3 ELSE 4 END;
    ELSIF NOT p_begin AND NOT v_found THEN
        RETURN CASE WHEN EXISTS (SELECT FROM acp_sessions WHERE session_id = p_session)
            THEN 5 ELSE 1 END;
    ELSIF NOT p_begin AND v_stop IS NOT NULL THEN
        RETURN 4;
    END IF;
    UPDATE acp_sessions
        SET updated_at = p_now,
            lease_expires = clock_timestamp() + make_interval(secs => p_ttl)
        WHERE session_id = p_session AND lease_holder = p_holder AND lease_token = p_token;
    IF NOT FOUND THEN
        RETURN CASE WHEN EXISTS (SELECT FROM acp_sessions WHERE session_id = p_session)
            THEN 2 ELSE 1 END;
    END IF;
    IF p_begin THEN
        SELECT coalesce(max(seq) + 1, 0) INTO v_seq FROM acp_turns WHERE session_id = p_session;
        INSERT INTO acp_turns (session_id, seq, turn_id, stop_reason)
            VALUES (p_session, v_seq, p_turn, p_end);
        DELETE FROM acp_prompt_queue WHERE session_id = p_session AND turn_id = p_turn;
    ELSE
        SELECT coalesce(max(part) + 1, 0) INTO v_part
            FROM acp_updates WHERE session_id = p_session AND turn_seq = v_seq;
    END IF;
    IF cardinality(p_items) > 0 THEN
        INSERT INTO acp_updates VALUES (p_session, v_seq, v_part, p_items);
    END IF;
    IF p_end IS NOT NULL AND NOT p_begin THEN
        UPDATE acp_turns SET stop_reason = p_end WHERE session_id = p_session AND seq = v_seq;
    END IF;
    RETURN 0;
END
$$;
"""

SET_VERSION: Final = "UPDATE acp_schema_version SET version = %s"

# --- sessions ---------------------------------------------------------------------------------

_COLUMNS: Final = (
    "session_id, owner, cwd, additional_directories, title, mode_id, config, created_at, updated_at"
)

CREATE: Final = f"""
INSERT INTO acp_sessions ({_COLUMNS}, lease_holder, lease_expires, lease_token)
VALUES (%(session_id)s, %(owner)s, %(cwd)s, %(dirs)s, %(title)s, %(mode_id)s, %(config)s,
        %(created_at)s, %(updated_at)s,
        %(holder)s, clock_timestamp() + make_interval(secs => %(ttl)s), 1)
ON CONFLICT (session_id) DO NOTHING
RETURNING lease_token
"""

GET: Final = f"""
SELECT {_COLUMNS} FROM acp_sessions WHERE session_id = %(session_id)s AND owner = %(owner)s
"""

UPDATE: Final = f"""
UPDATE acp_sessions
SET cwd = %(cwd)s, additional_directories = %(dirs)s, title = %(title)s,
    mode_id = %(mode_id)s, config = %(config)s, updated_at = %(now)s
WHERE session_id = %(session_id)s AND owner = %(owner)s
    AND lease_holder = %(holder)s AND lease_token = %(token)s
RETURNING {_COLUMNS}
"""

LIST: Final = f"""
SELECT {_COLUMNS} FROM acp_sessions
WHERE owner = %(owner)s
    AND (%(cwd)s::text IS NULL OR cwd = %(cwd)s)
    AND (%(after_at)s::text IS NULL OR (updated_at, session_id) < (%(after_at)s, %(after_id)s))
ORDER BY updated_at DESC, session_id DESC
LIMIT %(limit)s
"""

# A session another host serves (a live lease elsewhere) is not deleted under it.
DELETE: Final = """
DELETE FROM acp_sessions
WHERE session_id = %(session_id)s AND owner = %(owner)s
    AND (lease_holder IS NULL OR lease_holder = %(holder)s OR lease_expires <= clock_timestamp())
RETURNING session_id
"""

_WRITE_CALL: Final = """acp_write_turn(
    %(session_id)s, %(turn_id)s, %(holder)s, %(token)s, %(ttl)s::float8,
    %(now)s, %(begin)s, %(items)s::text[], %(end)s::text)"""

WRITE_TURN: Final = f"""
SELECT {_WRITE_CALL}
"""

# A write of a group commit: it takes its session's row first, and answers WRITE_LOCKED at
# once, writing nothing, if another transaction holds it (rows this transaction holds are
# not skipped). A missing session goes to acp_write_turn, which says so.
BATCH_WRITE_TURN: Final = f"""
WITH taken AS (
    SELECT session_id FROM acp_sessions WHERE session_id = %(session_id)s
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT CASE
    WHEN NOT EXISTS (SELECT FROM taken)
        AND EXISTS (SELECT FROM acp_sessions WHERE session_id = %(session_id)s)
    THEN {WRITE_LOCKED}
    ELSE {_WRITE_CALL}
END
"""

# Every turn with its items, in order; one row per write (a turn with none has one row
# whose items are NULL); no row at all when the owner has no such session, and one row
# with a NULL turn when the session has no turns.
HISTORY: Final = """
SELECT t.turn_id, t.stop_reason, u.items
FROM acp_sessions s
    LEFT JOIN acp_turns t ON t.session_id = s.session_id
    LEFT JOIN acp_updates u ON u.session_id = t.session_id AND u.turn_seq = t.seq
WHERE s.session_id = %(session_id)s AND s.owner = %(owner)s
ORDER BY t.seq, u.part
"""

# --- leases -----------------------------------------------------------------------------------

# Take the lease if it is free, expired or already ours; the token goes up when the holder
# changes. No row: the session is missing or leased elsewhere (see LEASE_STATE).
ACQUIRE: Final = """
UPDATE acp_sessions
SET lease_token = lease_token + CASE WHEN lease_holder = %(holder)s THEN 0 ELSE 1 END,
    lease_holder = %(holder)s,
    lease_expires = clock_timestamp() + make_interval(secs => %(ttl)s)
WHERE session_id = %(session_id)s
    AND (lease_holder IS NULL OR lease_holder = %(holder)s OR lease_expires <= clock_timestamp())
RETURNING lease_token
"""

# Seconds until a live lease elsewhere expires (no row: no such session).
LEASE_STATE: Final = """
SELECT greatest(extract(epoch FROM lease_expires - clock_timestamp()), 0)::float8
FROM acp_sessions WHERE session_id = %(session_id)s
"""

RELEASE: Final = """
UPDATE acp_sessions SET lease_holder = NULL, lease_expires = NULL
WHERE session_id = %(session_id)s AND lease_holder = %(holder)s AND lease_token = %(token)s
"""

RELEASE_ALL: Final = """
UPDATE acp_sessions SET lease_holder = NULL, lease_expires = NULL
WHERE lease_holder = %(holder)s
"""

# Extend every lease this holder still has; the rows returned are the leases kept.
RENEW_ALL: Final = """
UPDATE acp_sessions SET lease_expires = clock_timestamp() + make_interval(secs => %(ttl)s)
WHERE lease_holder = %(holder)s
RETURNING session_id, lease_token
"""

# --- held prompts -----------------------------------------------------------------------------

# Only a holder of the session's live lease holds prompts for it (no row: it is not).
HOLD_PROMPT: Final = """
INSERT INTO acp_prompt_queue (session_id, turn_id, holder, arrival, request)
SELECT session_id, %(turn_id)s, %(holder)s, %(arrival)s, %(request)s
FROM acp_sessions
WHERE session_id = %(session_id)s AND lease_holder = %(holder)s AND lease_token = %(token)s
ON CONFLICT (session_id, turn_id) DO NOTHING
RETURNING turn_id
"""

DROP_PROMPT: Final = """
DELETE FROM acp_prompt_queue WHERE session_id = %(session_id)s AND turn_id = %(turn_id)s
"""

# What other (earlier) holders left: this holder's own are waiting in its memory.
HELD_PROMPTS: Final = """
SELECT turn_id, request FROM acp_prompt_queue
WHERE session_id = %(session_id)s AND holder <> %(holder)s
ORDER BY arrival, turn_id
"""
