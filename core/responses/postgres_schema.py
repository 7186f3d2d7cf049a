"""The tables of the PostgreSQL store and how turnout brings a database up to date.

:data:`MIGRATIONS` is the ordered list of changes; ``turnout_schema_version`` holds one row per
change applied. :func:`migrate` applies the missing ones in one transaction under an advisory
lock, so routers starting together against an empty database migrate it once. A database
migrated by a newer turnout (more versions than this one knows) is refused, not changed.

Every row has a ``namespace`` (``responses.key_prefix``): routers with the same prefix share
their responses and conversations, others sharing the database do not see them.
"""

from __future__ import annotations

from typing import Any

#: The changes, in order: version N is ``MIGRATIONS[N - 1]``. Append; never edit one released.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE turnout_responses (
        namespace text NOT NULL,
        id text NOT NULL,
        data bytea NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (namespace, id)
    );
    CREATE INDEX turnout_responses_expiry ON turnout_responses (expires_at);
    CREATE TABLE turnout_response_items (
        namespace text NOT NULL,
        item_id text NOT NULL,
        response_id text NOT NULL,
        PRIMARY KEY (namespace, item_id),
        FOREIGN KEY (namespace, response_id) REFERENCES turnout_responses ON DELETE CASCADE
    );
    CREATE INDEX turnout_response_items_holder ON turnout_response_items (namespace, response_id);
    CREATE TABLE turnout_conversations (
        namespace text NOT NULL,
        id text NOT NULL,
        head bytea NOT NULL,
        size bigint NOT NULL,
        next_seq bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (namespace, id)
    );
    CREATE INDEX turnout_conversations_expiry ON turnout_conversations (expires_at);
    CREATE TABLE turnout_conversation_items (
        namespace text NOT NULL,
        conversation_id text NOT NULL,
        seq bigint NOT NULL,
        item_id text,
        data bytea NOT NULL,
        PRIMARY KEY (namespace, conversation_id, seq),
        FOREIGN KEY (namespace, conversation_id) REFERENCES turnout_conversations
            ON DELETE CASCADE
    );
    """,
)

#: The advisory lock migrations hold (any constant; "turnout" in ASCII).
_LOCK_KEY = 0x7475726E6F7574


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer turnout."""

    def __init__(self, version: int) -> None:
        super().__init__(
            f"the database's turnout schema is version {version}, newer than this turnout "
            f"knows ({len(MIGRATIONS)}): upgrade turnout"
        )


async def migrate(connection: Any, migrations: tuple[str, ...] = MIGRATIONS) -> list[int]:
    """Bring the database on ``connection`` (an asyncpg connection) up to the last version;
    the versions applied now (none when it was up to date)."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS turnout_schema_version ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await connection.fetchval("SELECT max(version) FROM turnout_schema_version")
        current = current or 0
        if current > len(migrations):
            raise SchemaTooNew(current)
        applied = []
        for version in range(current + 1, len(migrations) + 1):
            await connection.execute(migrations[version - 1])
            await connection.execute(
                "INSERT INTO turnout_schema_version (version) VALUES ($1)", version
            )
            applied.append(version)
        return applied
