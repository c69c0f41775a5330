"""langgraph-colosseum: production-grade memory for LangGraph agents.

`ColosseumSaver` / `AsyncColosseumSaver` store every step in Postgres `jsonb`.
"""

from langgraph_colosseum._core.codec import TypeRegistry
from langgraph_colosseum.aio import AsyncColosseumSaver
from langgraph_colosseum.errors import (
    CodecError,
    ColosseumError,
    CorruptRowError,
    InvalidConfigError,
    SchemaError,
    SchemaVersionError,
    UnsupportedValueError,
    UntrustedTypeError,
    ValueNotStorableError,
)
from langgraph_colosseum.saver import ColosseumSaver

__all__ = [
    "AsyncColosseumSaver",
    "CodecError",
    "ColosseumError",
    "ColosseumSaver",
    "CorruptRowError",
    "InvalidConfigError",
    "SchemaError",
    "SchemaVersionError",
    "TypeRegistry",
    "UnsupportedValueError",
    "UntrustedTypeError",
    "ValueNotStorableError",
]

__version__ = "0.1.0"
