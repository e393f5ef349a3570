"""What can go wrong with a store: every storage error derives from `StorageError`."""

from __future__ import annotations

from bench_build.errors import BenchBuildError


class StorageError(BenchBuildError, RuntimeError):
    """A storage operation failed. The message names the object and never holds credentials."""


class AccessDenied(StorageError):
    """The store refused the request: the credentials, or what they may do there (a bucket policy). A build
    reports it as the "permission" failure kind, like an output file the user may not write."""


class NotFound(StorageError):
    pass


class PreconditionFailed(StorageError):
    """A conditional write lost: the object exists (if_absent) or changed since it was read (if_match)."""


class VersionLocked(StorageError):
    """Another process holds the version's writer lock (or lease); the message names it."""
