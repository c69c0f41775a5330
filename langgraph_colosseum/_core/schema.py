"""Numbered schema migrations.

Rules: a migration is appended, never edited; each is idempotent; all of them
run in one transaction under a transaction-level advisory lock, so two
processes calling `setup()` at once both succeed (the second finds the work
done). Every primary key starts with `thread_id`, so the tables can be
distributed by it (Citus) unchanged. Identifier columns use the "C" collation:
checkpoint ids are uuid6 strings whose byte order is their time order, and a
locale collation may order them differently.
"""

from __future__ import annotations

# Any 64-bit constant unique to this package: "colosseum" in ASCII, truncated.
ADVISORY_LOCK_KEY = 0x636F6C6F7373

SCHEMA_TABLE = "colosseum_schema"

MIGRATIONS: list[str] = [
    # 1: checkpoints, channel values by version, pending writes, delta histories.
    """
    CREATE TABLE IF NOT EXISTS colosseum_checkpoints (
        thread_id            text COLLATE "C" NOT NULL,
        checkpoint_ns        text COLLATE "C" NOT NULL DEFAULT '',
        checkpoint_id        text COLLATE "C" NOT NULL,
        parent_checkpoint_id text COLLATE "C",
        run_id               text COLLATE "C",
        checkpoint           jsonb NOT NULL,
        metadata             jsonb NOT NULL DEFAULT '{}',
        created_at           timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    CREATE INDEX IF NOT EXISTS colosseum_checkpoints_run_id
        ON colosseum_checkpoints (run_id) WHERE run_id IS NOT NULL;
    -- list() of a thread across its namespaces, newest first, page by page.
    CREATE INDEX IF NOT EXISTS colosseum_checkpoints_thread_order
        ON colosseum_checkpoints (thread_id, checkpoint_id, checkpoint_ns);

    -- One row per (channel, version): a checkpoint names the versions it holds
    -- in checkpoint->'channel_versions', so an unchanged channel costs nothing.
    -- encoding: 'json' (value holds typed jsonb), 'serde' (value_bytes holds the
    -- serializer's bytes, value_type its type), 'empty' (the channel was cleared),
    -- 'append' / 'merge' (value holds what changed since base_version; see
    -- _core/shapes.py). depth counts the deltas since the last full row.
    CREATE TABLE IF NOT EXISTS colosseum_channel_values (
        thread_id     text COLLATE "C" NOT NULL,
        checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
        channel       text COLLATE "C" NOT NULL,
        version       text COLLATE "C" NOT NULL,
        encoding      text NOT NULL
                      CHECK (encoding IN ('json', 'serde', 'empty', 'append', 'merge')),
        value         jsonb,
        value_bytes   bytea,
        value_type    text,
        base_version  text COLLATE "C",
        depth         integer NOT NULL DEFAULT 0,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version),
        CHECK ((encoding IN ('append', 'merge')) = (base_version IS NOT NULL))
    );

    CREATE TABLE IF NOT EXISTS colosseum_writes (
        thread_id     text COLLATE "C" NOT NULL,
        checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
        checkpoint_id text COLLATE "C" NOT NULL,
        task_id       text COLLATE "C" NOT NULL,
        idx           integer NOT NULL,
        task_path     text COLLATE "C" NOT NULL DEFAULT '',
        channel       text COLLATE "C" NOT NULL,
        encoding      text NOT NULL CHECK (encoding IN ('json', 'serde')),
        value         jsonb,
        value_bytes   bytea,
        value_type    text,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    );

    -- A DeltaChannel's history frozen at one checkpoint, written when prune or
    -- delete_for_runs removes the ancestors it was rebuilt from: seq 0 is the
    -- seed (when there is one), seq 1.. are the writes after it, oldest first.
    CREATE TABLE IF NOT EXISTS colosseum_delta_histories (
        thread_id     text COLLATE "C" NOT NULL,
        checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
        checkpoint_id text COLLATE "C" NOT NULL,
        channel       text COLLATE "C" NOT NULL,
        seq           integer NOT NULL,
        task_id       text COLLATE "C",
        encoding      text NOT NULL CHECK (encoding IN ('json', 'serde')),
        value         jsonb,
        value_bytes   bytea,
        value_type    text,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, channel, seq)
    );
    """,
    # 2: the ledger of IdempotentToolNode: one row per tool execution.
    """
    CREATE TABLE IF NOT EXISTS colosseum_tool_calls (
        thread_id       text COLLATE "C" NOT NULL,
        idempotency_key text COLLATE "C" NOT NULL UNIQUE,
        checkpoint_ns   text COLLATE "C" NOT NULL DEFAULT '',
        task_id         text COLLATE "C",
        tool_name       text NOT NULL,
        tool_call_id    text,
        input           jsonb,
        output          jsonb,
        output_bytes    bytea,
        output_type     text,
        status          text NOT NULL
                        CHECK (status IN ('PENDING', 'RUNNING', 'SUCCESS', 'FAILED', 'TIMED_OUT')),
        error           text,
        attempts        integer NOT NULL DEFAULT 0,
        lease_owner     text,
        lease_until     timestamptz,
        started_at      timestamptz,
        completed_at    timestamptz,
        PRIMARY KEY (thread_id, idempotency_key)
    );
    """,
    # 3: the thread registry, kept current by put / put_writes in their statement.
    # `state_values` holds the root head's small channel values (up to 1 KB each,
    # see store.SEARCHABLE_VALUE_BYTES) for `threads.search(values=...)`.
    """
    CREATE TABLE IF NOT EXISTS colosseum_threads (
        thread_id          text COLLATE "C" PRIMARY KEY,
        status             text NOT NULL DEFAULT 'idle'
                           CHECK (status IN ('idle', 'busy', 'interrupted', 'error')),
        created_at         timestamptz NOT NULL DEFAULT now(),
        updated_at         timestamptz NOT NULL DEFAULT now(),
        metadata           jsonb NOT NULL DEFAULT '{}',
        state_values       jsonb NOT NULL DEFAULT '{}',
        head_checkpoint_id text COLLATE "C",
        -- the checkpoint an 'interrupted' / 'error' status was recorded for
        status_checkpoint_id text COLLATE "C",
        expires_at         timestamptz,
        run_owner          text,
        run_token          bigint NOT NULL DEFAULT 0,
        run_lease_until    timestamptz
    ) WITH (fillfactor = 80);  -- room for HOT updates: a put rewrites the row
    CREATE INDEX IF NOT EXISTS colosseum_threads_metadata
        ON colosseum_threads USING gin (metadata jsonb_path_ops);
    CREATE INDEX IF NOT EXISTS colosseum_threads_values
        ON colosseum_threads USING gin (state_values jsonb_path_ops);
    CREATE INDEX IF NOT EXISTS colosseum_threads_status_updated
        ON colosseum_threads (status, updated_at DESC);
    CREATE INDEX IF NOT EXISTS colosseum_threads_updated
        ON colosseum_threads (updated_at DESC);
    CREATE INDEX IF NOT EXISTS colosseum_threads_expires
        ON colosseum_threads (expires_at) WHERE expires_at IS NOT NULL;
    """,
    # 4: what keeps the Redis hot heads true to this database (see _core/hot.py).
    # The incarnation token: made by setup() (or by the first saver that finds
    # none), UNLOGGED so that crash recovery, point-in-time recovery and replica
    # promotion empty it and a new one is made. Together with the database oid
    # and this table's own oid (a restore recreates both), it names the
    # database incarnation whose heads a saver may use. One row; no thread_id:
    # on Citus it is a reference table.
    # Stale heads: heads a write could not update or drop because Redis refused
    # it, recorded for any worker to drop (its next write applies them).
    """
    CREATE UNLOGGED TABLE IF NOT EXISTS colosseum_incarnation (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        token     text NOT NULL
    );
    CREATE TABLE IF NOT EXISTS colosseum_stale_heads (
        thread_id   text COLLATE "C" NOT NULL,
        head_key    text COLLATE "C" NOT NULL,
        recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (thread_id, head_key)
    );
    """,
    # 5: what was deleted. delete_thread, delete_for_runs, prune and the
    # retention sweep record every checkpoint they remove, in their own
    # transaction, so that a run still in flight cannot write it back: a put
    # that continues from one of these, or writes to one, is refused in its
    # statement (see sql.PUT, sql.PUT_WRITES). A put that is refused that way
    # is recorded too, so the writes of its tasks are refused after it.
    """
    CREATE TABLE IF NOT EXISTS colosseum_tombstones (
        thread_id     text COLLATE "C" NOT NULL,
        checkpoint_ns text COLLATE "C" NOT NULL,
        checkpoint_id text COLLATE "C" NOT NULL,
        deleted_at    timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    -- A deleted thread: a checkpoint created before `before` (the time of the
    -- deletion as a uuid6 timestamp, 15 hex digits, as LangGraph's checkpoint
    -- ids begin) belongs to a run of the deleted thread, and is refused even if
    -- its put had not reached Postgres when the thread was deleted.
    CREATE TABLE IF NOT EXISTS colosseum_deleted_threads (
        thread_id  text COLLATE "C" PRIMARY KEY,
        before     text COLLATE "C" NOT NULL,
        deleted_at timestamptz NOT NULL DEFAULT now()
    );
    -- Runs removed by delete_for_runs: their later puts are refused. Keyed by
    -- run alone (a run not yet stored has no known thread): a small table, a
    -- reference table on Citus.
    CREATE TABLE IF NOT EXISTS colosseum_deleted_runs (
        run_id     text COLLATE "C" PRIMARY KEY,
        deleted_at timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 6: the lineage of a copied thread: copy_thread records, for the target,
    # the thread whose tool ledger its calls are keyed by (the source's own
    # lineage, or the source). IdempotentToolNode keys a call on a copy as the
    # source keyed it, so the copy finds the source's ledger rows and does not
    # repeat a side effect the source recorded. A thread without a row is its
    # own lineage.
    """
    CREATE TABLE IF NOT EXISTS colosseum_thread_lineage (
        thread_id text COLLATE "C" PRIMARY KEY,
        lineage   text COLLATE "C" NOT NULL
    );
    CREATE INDEX IF NOT EXISTS colosseum_thread_lineage_lineage
        ON colosseum_thread_lineage (lineage);
    """,
    # 7: the runs of `saver.runs(graph)` (double texting, see _core/multitask.py):
    # one row per run that was admitted or queued. `seq` is arrival order (the
    # queue of `enqueue`); `lease_until` keeps a queued run's place while its
    # process lives; `token` is the fencing token the run writes under (the
    # thread row's run_token when it took the thread); `metadata_before` is the
    # thread's registry metadata when it started, which `rollback` restores.
    """
    CREATE TABLE IF NOT EXISTS colosseum_runs (
        thread_id       text COLLATE "C" NOT NULL,
        run_id          text COLLATE "C" NOT NULL,
        seq             bigint GENERATED ALWAYS AS IDENTITY,
        strategy        text NOT NULL
                        CHECK (strategy IN ('reject', 'enqueue', 'interrupt', 'rollback')),
        status          text NOT NULL
                        CHECK (status IN ('pending', 'running', 'success', 'error',
                                          'interrupted', 'rolled_back')),
        holder          text NOT NULL,
        token           bigint,
        lease_until     timestamptz,
        created_at      timestamptz NOT NULL DEFAULT now(),
        started_at      timestamptz,
        ended_at        timestamptz,
        stopped_by      text,
        error           text,
        metadata_before jsonb,
        PRIMARY KEY (thread_id, run_id)
    );
    CREATE INDEX IF NOT EXISTS colosseum_runs_run_id ON colosseum_runs (run_id);
    CREATE INDEX IF NOT EXISTS colosseum_runs_queue
        ON colosseum_runs (thread_id, seq) WHERE status = 'pending';
    """,
    # 8: the run that wrote each pending write. A run that resumes a checkpoint
    # writes its first step's writes (and its resume value) on that checkpoint,
    # which is not its own: delete_for_runs finds them by this column.
    """
    ALTER TABLE colosseum_writes ADD COLUMN IF NOT EXISTS run_id text COLLATE "C";
    CREATE INDEX IF NOT EXISTS colosseum_writes_run_id
        ON colosseum_writes (run_id) WHERE run_id IS NOT NULL;
    """,
    # 9: the registry metadata keys a run's puts merge (its config metadata):
    # `rollback` restores these alone, so that a key set meanwhile by someone
    # else (threads.update) stays. NULL (a run recorded before): all of them.
    """
    ALTER TABLE colosseum_runs ADD COLUMN IF NOT EXISTS metadata_keys text[];
    """,
    # 10: the state version of the code that wrote each pending write (a
    # versioned saver's; NULL: unversioned, or written before). A resume cut
    # short leaves newer code's writes pending on an older checkpoint: they are
    # migrated from their own version, not from their checkpoint's.
    """
    ALTER TABLE colosseum_writes ADD COLUMN IF NOT EXISTS state_version integer;
    """,
    # 11: each thread's deletion epoch, which keeps a write's late Redis script
    # from bringing back what a deletion removed (see _core/hot.py, "Never
    # stale"). delete_thread, the retention sweep, prune and delete_for_runs
    # move it forward in their own transaction; put, put_writes and a read
    # that refills Redis return it from their statement. A thread with no row
    # is at epoch 0. Apart from the registry row, which delete_thread removes:
    # a thread's epoch never goes back, deleted or not, so a write made before
    # a deletion is never taken for one made after it.
    """
    CREATE TABLE IF NOT EXISTS colosseum_thread_epochs (
        thread_id text COLLATE "C" PRIMARY KEY,
        epoch     bigint NOT NULL
    );
    """,
    # 12: who set each registry metadata key last, and what that replaced:
    # {key: {"t": token, "v": value}} for a key a run's put set last (the
    # token it writes under; "v" absent: the key was not there), none for a
    # key someone else set last (threads.update, an unfenced put). `rollback`
    # puts back the stopped run's entries alone, so a key others set after the
    # run did keeps their value (before, a snapshot taken when the run started
    # was put back, colosseum_runs.metadata_before). The run holding a thread
    # now gets its entries from that snapshot, so its rollback restores as
    # before.
    """
    ALTER TABLE colosseum_threads
        ADD COLUMN IF NOT EXISTS metadata_undo jsonb NOT NULL DEFAULT '{}';
    UPDATE colosseum_threads t
    SET metadata_undo = (
        SELECT coalesce(jsonb_object_agg(k.key, CASE
                   WHEN r.metadata_before ? k.key
                   THEN jsonb_build_object('t', r.token, 'v', r.metadata_before -> k.key)
                   ELSE jsonb_build_object('t', r.token) END), '{}')
        FROM unnest(coalesce(r.metadata_keys,
                             ARRAY(SELECT jsonb_object_keys(t.metadata)))) AS k(key))
    FROM colosseum_runs r
    WHERE r.thread_id = t.thread_id AND r.run_id = t.run_owner AND r.token = t.run_token
      AND r.status = 'running' AND r.metadata_before IS NOT NULL;
    """,
    # 13: the run that recorded each tool call, and the checkpoint the call was
    # made on (its call site: the checkpoint its tools task ran on, in that
    # task's parent namespace). delete_for_runs (and so `rollback`) deletes a
    # run's records with its checkpoints, unless a checkpoint that stays still
    # holds the call (sql.DELETE_RUNS_TOOL_CALLS). NULL: recorded before, or
    # by older code; such a record stays, as it did.
    """
    ALTER TABLE colosseum_tool_calls
        ADD COLUMN IF NOT EXISTS run_id text COLLATE "C",
        ADD COLUMN IF NOT EXISTS call_ns text COLLATE "C",
        ADD COLUMN IF NOT EXISTS call_checkpoint_id text COLLATE "C";
    CREATE INDEX IF NOT EXISTS colosseum_tool_calls_run_id
        ON colosseum_tool_calls (run_id) WHERE run_id IS NOT NULL;
    """,
]

LATEST_VERSION = len(MIGRATIONS)

CREATE_SCHEMA_TABLE = f"""
CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
LOCK = "SELECT pg_advisory_xact_lock(%(key)s)"
CURRENT_VERSION = f"SELECT coalesce(max(version), 0) FROM {SCHEMA_TABLE}"
