"""langgraph-colosseum: production-grade memory for LangGraph agents.

`ColosseumSaver` / `AsyncColosseumSaver` store every step in Postgres `jsonb`;
`ColosseumStore` / `AsyncColosseumStore` are the long-term memory `BaseStore`.
"""

from langgraph_colosseum import telemetry
from langgraph_colosseum._core.codec import TypeRegistry
from langgraph_colosseum._core.crypt import Encryption
from langgraph_colosseum._core.threads import Retention
from langgraph_colosseum._core.versions import Migration, StateVersions
from langgraph_colosseum.aio import AsyncColosseumSaver
from langgraph_colosseum.errors import (
    CheckpointDeletedError,
    ClassChangedError,
    CodecError,
    ColosseumError,
    CorruptRowError,
    DatabaseUnavailableError,
    EncryptedFieldError,
    InvalidConfigError,
    LeaseLostError,
    LedgerMissingError,
    OrphanedTasksError,
    RunInterruptedError,
    RunNotFoundError,
    RunQueueTimeoutError,
    RunRolledBackError,
    SchemaError,
    SchemaMissingError,
    SchemaVersionError,
    StateMigrationError,
    StateVersionError,
    ThreadBusyError,
    ThreadConflictError,
    ThreadNotFoundError,
    ToolFailedError,
    ToolOutcomeUnknownError,
    ToolTimeoutError,
    ToolWaitTimeoutError,
    UnregisteredClassError,
    UnsupportedValueError,
    UntrustedTypeError,
    ValueNotStorableError,
)
from langgraph_colosseum.memory import AsyncColosseumStore, ColosseumStore
from langgraph_colosseum.runs import RunInfo
from langgraph_colosseum.saver import ColosseumSaver
from langgraph_colosseum.threads import AuditEntry, ThreadInfo
from langgraph_colosseum.tools import IdempotentToolNode, current_idempotency_key

__all__ = [
    "AsyncColosseumSaver",
    "AsyncColosseumStore",
    "AuditEntry",
    "CheckpointDeletedError",
    "ClassChangedError",
    "CodecError",
    "ColosseumError",
    "ColosseumSaver",
    "ColosseumStore",
    "CorruptRowError",
    "DatabaseUnavailableError",
    "EncryptedFieldError",
    "Encryption",
    "IdempotentToolNode",
    "InvalidConfigError",
    "LeaseLostError",
    "LedgerMissingError",
    "Migration",
    "OrphanedTasksError",
    "Retention",
    "RunInfo",
    "RunInterruptedError",
    "RunNotFoundError",
    "RunQueueTimeoutError",
    "RunRolledBackError",
    "SchemaError",
    "SchemaMissingError",
    "SchemaVersionError",
    "StateMigrationError",
    "StateVersionError",
    "StateVersions",
    "ThreadBusyError",
    "ThreadConflictError",
    "ThreadInfo",
    "ThreadNotFoundError",
    "ToolFailedError",
    "ToolOutcomeUnknownError",
    "ToolTimeoutError",
    "ToolWaitTimeoutError",
    "TypeRegistry",
    "UnregisteredClassError",
    "UnsupportedValueError",
    "UntrustedTypeError",
    "ValueNotStorableError",
    "current_idempotency_key",
    "telemetry",
]

__version__ = "0.1.0"
