"""A private database on the machine's PostgreSQL (127.0.0.1:5432), created for a test and dropped after it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def postgres_database() -> Iterator[str]:
    """Yields the SQLAlchemy URL of a fresh database; skips the test when PostgreSQL is not running."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"headwater_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        # CI has PostgreSQL (the machine starts it): there a missing server is a failure, not a skip.
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            f"PostgreSQL is not reachable at 127.0.0.1:5432 ({exc.orig})")
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
