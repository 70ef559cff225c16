"""The shared error types, re-exported so that jobs/ code and tests keep writing ``from jobs.errors import …``.

They live in ``pipelines.errors``, the bottom layer, because pipelines/ and crawler/ raise them too and
must not import from jobs/ (docs/architecture.md).
"""

from pipelines.errors import (ConfigError, DatabaseLockedError, ExitCode, Interrupted, LLMError, LLMUnavailableError,
                              ModelNotFoundError, NoSuchDatabase, NothingToDoError, StoreError, WebqaError,
                              WorkSummary, WriteFailedError, require_database)

__all__ = [
    "ConfigError", "DatabaseLockedError", "ExitCode", "Interrupted", "LLMError", "LLMUnavailableError",
    "ModelNotFoundError", "NoSuchDatabase", "NothingToDoError", "WriteFailedError", "StoreError", "WebqaError",
    "WorkSummary", "require_database",
]
