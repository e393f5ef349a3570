"""The multi-node tests use the session's SeaweedFS server of tests/pipeline (one server per session)."""

from tests.pipeline.conftest import seaweed  # noqa: F401
