"""Checked reads: a Parquet file whose page CRCs, size and rows are checked against its manifest, and
the one-line `IntegrityError` when they are not."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench_build.errors import BenchBuildError
from bench_build.manifests.manifest import ManifestError
from bench_build.storage import StorageError, denied_message


class IntegrityError(ManifestError):
    """A file of a version is not what its manifest says: another size, row count or sha256, a data page whose
    CRC fails, or a compact row that does not fit its clean scan. The message names the file and the remedy."""


class MissingFile(IntegrityError, FileNotFoundError):
    """A file the manifest lists is not there (still a `FileNotFoundError` for callers that catch that)."""


class NotInVersion(BenchBuildError, KeyError):
    """A corruption, split or example the version does not have (still a `KeyError` for callers that catch that).
    Its message is the sentence itself, not KeyError's quoted repr."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def remedy(version: str | None) -> str:
    verify = f"`bench-build verify {version}`" if version else "`bench-build verify`"
    return f"the file changed since the build: re-pull it or run {verify}"


def missing_file(where: str, version: str) -> MissingFile:
    """The error for a file the manifest lists that is not there."""
    return MissingFile(f"{where}: listed in the manifest but missing; re-pull the version or run "
                       f"`bench-build verify {version}`")


def check_entry(entry: dict[str, Any] | None, where: str, version: str, *, size: int | None = None,
                rows: int | None = None) -> None:
    """Refuse (`IntegrityError`) a file whose ``size`` or ``rows`` is not what its manifest ``entry`` says, where the
    entry gives it: another file put in its place, or one cut short."""
    if entry is None:
        return
    if size is not None and "bytes" in entry and size != entry["bytes"]:
        raise IntegrityError(f"{where}: {size} bytes, manifest says {entry['bytes']}; {remedy(version)}")
    if rows is not None and "rows" in entry and rows != entry["rows"]:
        raise IntegrityError(f"{where}: {rows} rows, manifest says {entry['rows']}; {remedy(version)}")


def unreadable(e: BaseException, version: str | Path) -> str:
    """The one line for a file of ``version`` that cannot be read, ``e`` naming it (a damaged page header, which
    no page checksum covers, in pyarrow's own words; a file the OS refuses): what to run to check them all."""
    return f"{str(e).rstrip('.')}: the version's file cannot be read; `bench-build verify {version}` checks them all"


#: pyarrow's S3 error names (``AWS Error ACCESS_DENIED during HeadObject``) that mean "credentials rejected"
_S3_DENIED = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "EXPIRED_TOKEN",
              "INVALID_CLIENT_TOKEN_ID", "UNRECOGNIZED_CLIENT", "MISSING_AUTHENTICATION_TOKEN")


def read_error(e: BaseException, where: str, version: str | None, op: str = "read") -> BaseException:
    """The error to raise for pyarrow's ``e`` while reading ``where``: a failed page checksum or undecodable bytes
    become `IntegrityError`, rejected S3 credentials the same one line as the CLI's, anything else names the file."""
    text = str(e)
    first = text.splitlines()[0] if text else type(e).__name__
    if "CRC checksum verification failed" in text or "could not verify page integrity" in text:
        return IntegrityError(f"{where}: a data page does not match its checksum ({first}); {remedy(version)}")
    m = re.search(r"AWS Error ([A-Z_]+)", text)
    if m and m.group(1) in _S3_DENIED:
        code = "".join(w.capitalize() for w in m.group(1).split("_"))  # S3's spelling: AccessDenied, as boto3's
        return StorageError(denied_message(where, op, code))
    if "deserialize thrift" in text or "magic bytes" in text:  # the footer, which no page checksum covers
        return IntegrityError(f"{where}: its Parquet footer cannot be decoded ({first}); {remedy(version)}")
    if isinstance(e, pa.ArrowInvalid | pa.ArrowNotImplementedError | UnicodeDecodeError):
        # undecodable pages or footer (a column name that is not UTF-8, an integer width no writer uses): bytes
        # damaged where no checksum covers them
        return IntegrityError(f"{where}: cannot be decoded ({first}); {remedy(version)}")
    if isinstance(e, OSError):
        return OSError(f"{where}: {first}")
    return e


@contextmanager
def _named(where: str, version: str | None = None, op: str = "read") -> Iterator[None]:
    try:
        yield
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise read_error(e, where, version, op) from None


class CheckedParquetFile(pq.ParquetFile):
    """A `pyarrow.parquet.ParquetFile` whose read errors name the file (``where``): pass
    ``page_checksum_verification=True`` to have a damaged data page raise `IntegrityError` instead of decoding
    to other values."""

    def __init__(self, source: Any, where: str, *, version: str | None = None, **kwargs: Any) -> None:
        self.where, self.version_url = where, version
        with _named(where, version, "open"):
            super().__init__(source, **kwargs)

    def read(self, *args: Any, **kwargs: Any) -> pa.Table:
        with _named(self.where, self.version_url):
            return super().read(*args, **kwargs)

    def read_row_group(self, *args: Any, **kwargs: Any) -> pa.Table:
        with _named(self.where, self.version_url):
            return super().read_row_group(*args, **kwargs)

    def read_row_groups(self, *args: Any, **kwargs: Any) -> pa.Table:
        with _named(self.where, self.version_url):
            return super().read_row_groups(*args, **kwargs)

    def iter_batches(self, *args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        with _named(self.where, self.version_url):
            yield from super().iter_batches(*args, **kwargs)

    @classmethod
    def local(cls, path: Any) -> CheckedParquetFile:
        """A local file opened with its pages' checksums verified, errors naming its path: a damaged page is an
        `IntegrityError`, never values decoded from other bytes."""
        return cls(path, str(path), page_checksum_verification=True)
