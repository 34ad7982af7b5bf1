"""The durable source store on SQLite and on the machine's real PostgreSQL."""

from __future__ import annotations

import pytest

from headwater.sources.model import SourceConfig
from headwater.store.source_store import RunRow, SourceExists, SourceStore
from tests.integration.postgres import postgres_database


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'headwater.sqlite3'}"
    else:
        with postgres_database() as url:
            yield url


@pytest.mark.timeout(60)
def test_sources_and_runs_survive_a_new_store_on_the_same_database(store_url):
    store = SourceStore(store_url)
    config = SourceConfig(id="docs", kind="folder", options={"path": "/srv/docs"}, schedule_interval_seconds=60)
    store.create_source(config, {"token": "DOCS_TOKEN"})
    with pytest.raises(SourceExists):
        store.create_source(config, {})
    store.save_run(RunRow(id="r1", source_id="docs", kind="full", status="complete", created_at=1.0,
                          counters={"indexed": 3}, errors={"a.md": "bad"}))
    store.engine.dispose()

    reopened = SourceStore(store_url)
    row = reopened.get_source("docs")
    assert row.config() == config and row.secret_refs == {"token": "DOCS_TOKEN"}
    updated = reopened.update_source(config.model_copy(update={"schedule_cron": "0 3 * * *",
                                                               "schedule_interval_seconds": None}), None)
    assert updated.secret_refs == {"token": "DOCS_TOKEN"} and reopened.get_source("docs").schedule_cron == "0 3 * * *"
    assert reopened.get_run("r1").errors == {"a.md": "bad"}
    assert [r.id for r in reopened.list_runs(10, "docs")] == ["r1"]
    for n in range(2, 6):
        reopened.save_run(RunRow(id=f"r{n}", source_id="docs", kind="full", status="complete", created_at=float(n),
                                 counters={}, errors={}))
    reopened.save_run(RunRow(id="old-but-running", source_id="docs", kind="full", status="running", created_at=0.5,
                             counters={}, errors={}))
    reopened.trim_runs("docs", 2)
    assert [r.id for r in reopened.list_runs(10, "docs")] == ["r5", "r4", "old-but-running"]
    assert reopened.delete_source("docs") and not reopened.delete_source("docs")
    assert reopened.list_sources() == []
    reopened.engine.dispose()


@pytest.mark.timeout(60)
def test_a_database_from_an_earlier_release_gains_the_new_run_columns(store_url):
    """The run table before runs recorded their trigger and skipped documents: opening it adds the columns."""
    from sqlalchemy import create_engine, text

    old = create_engine(store_url)
    with old.begin() as connection:
        connection.execute(text(
            "CREATE TABLE headwater_embedded_runs (id VARCHAR(64) PRIMARY KEY, source_id VARCHAR(200), "
            "kind VARCHAR(20), status VARCHAR(40), created_at FLOAT, started_at FLOAT, finished_at FLOAT, "
            "counters JSON, errors JSON)"))
        connection.execute(text("INSERT INTO headwater_embedded_runs (id, source_id, kind, status, created_at, "
                                "counters, errors) VALUES ('old', 'docs', 'full', 'complete', 1.0, '{}', '{}')"))
    old.dispose()
    store = SourceStore(store_url)
    assert store.get_run("old").trigger == "manual" and store.get_run("old").skipped is None
    store.save_run(RunRow(id="new", source_id="docs", kind="full", status="complete", created_at=2.0, counters={},
                          errors={}, trigger="schedule", skipped={"empty.md": "empty file (0 bytes)"}))
    assert SourceStore(store_url).get_run("new").skipped == {"empty.md": "empty file (0 bytes)"}
