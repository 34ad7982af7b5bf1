"""Durable records the HTTP app owns: sources added through the API, and embedded-mode run history.

Redis is not durable (the fleet keeps only what can be recomputed there), so a source an operator
added must live elsewhere: SQLAlchemy over SQLite next to an embedded Chroma, PostgreSQL for a fleet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Float, String, create_engine, delete, event, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from headwater.settings import Settings

from headwater.sources.model import SourceConfig


class Base(DeclarativeBase):
    pass


class SourceRow(Base):
    __tablename__ = "headwater_sources"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    options: Mapped[dict] = mapped_column(JSON, default=dict)
    collection: Mapped[str | None] = mapped_column(String(200), nullable=True)
    schedule_interval_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    schedule_cron: Mapped[str | None] = mapped_column(String(120), nullable=True)
    # option name -> the environment variable that holds the secret (the value itself is never stored)
    secret_refs: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    def config(self) -> SourceConfig:
        return SourceConfig(id=self.id, kind=self.kind, options=dict(self.options or {}), collection=self.collection,
                            schedule_interval_seconds=self.schedule_interval_seconds, schedule_cron=self.schedule_cron)


class RunRow(Base):
    """A run of embedded serve (the fleet keeps its runs in Redis)."""

    __tablename__ = "headwater_embedded_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    source_id: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[float] = mapped_column(Float, index=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    counters: Mapped[dict] = mapped_column(JSON, default=dict)
    errors: Mapped[dict] = mapped_column(JSON, default=dict)
    # Added after the first release: databases made before get them from _add_new_columns.
    trigger: Mapped[str] = mapped_column(String(20), default="manual", server_default="manual")
    warnings: Mapped[dict | None] = mapped_column(JSON, nullable=True, default=dict)  # uri -> what went wrong, not fatal
    skipped: Mapped[dict | None] = mapped_column(JSON, nullable=True, default=dict)  # uri -> why it was skipped


class ScheduleMark(Base):
    """When an embedded serve's schedule of a source last fired (or its period started), kept across restarts."""

    __tablename__ = "headwater_schedule_marks"

    source_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    schedule: Mapped[str] = mapped_column(String(160))  # the period it belongs to: a changed one starts afresh
    period_started_at: Mapped[float] = mapped_column(Float)


class PausedSchedule(Base):
    """A source whose schedule an operator paused (declared or stored sources alike): no scheduled runs until resumed."""

    __tablename__ = "headwater_paused_schedules"

    source_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    paused_at: Mapped[float] = mapped_column(Float)


class StatsSample(Base):
    """One sample of the dashboard's charts (queue depths, documents done), so a restart keeps the last hour."""

    __tablename__ = "headwater_stats_samples"

    t: Mapped[float] = mapped_column(Float, primary_key=True)
    data: Mapped[dict] = mapped_column(JSON)


class SourceExists(ValueError):
    pass


def database_url(settings: Settings) -> str:
    """The configured database, or SQLite beside the embedded Chroma directory."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    path = Path(settings.chroma_path).resolve().parent / "headwater.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _sqlite_write_ahead_log(connection: Any, _record: Any) -> None:
    """SQLite in WAL mode, syncing at checkpoints: a commit costs no fsync of its own.

    A webhook must be answered within GitHub's patience (and ours: 100 ms) while it records its
    delivery id and its run; with a rollback journal each of those commits waited ~50 ms on a busy
    disk. A power loss may lose the last commits (never corrupt the file): a lost delivery id lets
    a replay through, which finds its commit already synced.
    """
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _add_new_columns(engine: Engine) -> None:
    """Columns a later release added to an existing table (create_all makes new tables, never new columns).

    Each such column is nullable or has a server default, so adding it is all an existing database needs.
    """
    from sqlalchemy import inspect, text

    inspector = inspect(engine)
    for table in Base.metadata.sorted_tables:
        if not inspector.has_table(table.name):
            continue
        have = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in have:
                continue
            kind = column.type.compile(dialect=engine.dialect)
            default = f" DEFAULT '{column.server_default.arg}'" if column.server_default is not None else ""
            with engine.begin() as connection:
                connection.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}{default}'))


class SourceStore:
    """Sources and embedded runs; one engine per process, sessions per call."""

    def __init__(self, url: str) -> None:
        options: dict[str, Any] = {"pool_pre_ping": True}
        if url.startswith("sqlite"):
            options["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.engine: Engine = create_engine(url, **options)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_write_ahead_log)
        Base.metadata.create_all(self.engine)
        _add_new_columns(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> SourceStore:
        return cls(database_url(settings))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session

    # Sources ---------------------------------------------------------------------------------

    def list_sources(self) -> list[SourceRow]:
        with self.session() as s:
            return list(s.scalars(select(SourceRow).order_by(SourceRow.id)))

    def get_source(self, source_id: str) -> SourceRow | None:
        with self.session() as s:
            return s.get(SourceRow, source_id)

    def create_source(self, config: SourceConfig, secret_refs: dict[str, str]) -> SourceRow:
        now = time.time()
        row = SourceRow(id=config.id, kind=config.kind, options=config.options, collection=config.collection,
                        schedule_interval_seconds=config.schedule_interval_seconds, schedule_cron=config.schedule_cron,
                        secret_refs=secret_refs, created_at=now, updated_at=now)
        try:
            with self.session() as s:
                s.add(row)
        except IntegrityError:
            raise SourceExists(f"source {config.id!r} already exists") from None
        return row

    def update_source(self, config: SourceConfig, secret_refs: dict[str, str] | None) -> SourceRow | None:
        with self.session() as s:
            row = s.get(SourceRow, config.id)
            if row is None:
                return None
            row.kind, row.options, row.collection = config.kind, config.options, config.collection
            row.schedule_interval_seconds, row.schedule_cron = config.schedule_interval_seconds, config.schedule_cron
            if secret_refs is not None:
                row.secret_refs = secret_refs
            row.updated_at = time.time()
            return row

    def delete_source(self, source_id: str) -> bool:
        with self.session() as s:
            s.execute(delete(ScheduleMark).where(ScheduleMark.source_id == source_id))
            s.execute(delete(PausedSchedule).where(PausedSchedule.source_id == source_id))
            return s.execute(delete(SourceRow).where(SourceRow.id == source_id)).rowcount > 0

    # Paused schedules ------------------------------------------------------------------------

    def pause_schedule(self, source_id: str) -> None:
        with self.session() as s:
            s.merge(PausedSchedule(source_id=source_id, paused_at=time.time()))

    def resume_schedule(self, source_id: str) -> None:
        with self.session() as s:
            s.execute(delete(PausedSchedule).where(PausedSchedule.source_id == source_id))

    def paused_schedules(self) -> dict[str, float]:
        """Source id -> when its schedule was paused."""
        with self.session() as s:
            return {row.source_id: row.paused_at for row in s.scalars(select(PausedSchedule))}

    # Chart samples ---------------------------------------------------------------------------

    def save_sample(self, sample: dict[str, Any], keep: int) -> None:
        """Keep this sample and the `keep` - 1 before it."""
        with self.session() as s:
            s.merge(StatsSample(t=sample["t"], data=sample))
            cutoff = s.scalars(select(StatsSample.t).order_by(StatsSample.t.desc()).offset(keep).limit(1)).first()
            if cutoff is not None:
                s.execute(delete(StatsSample).where(StatsSample.t <= cutoff))

    def samples(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` samples, oldest first."""
        with self.session() as s:
            rows = list(s.scalars(select(StatsSample).order_by(StatsSample.t.desc()).limit(limit)))
        return [row.data for row in reversed(rows)]

    # Embedded schedules ----------------------------------------------------------------------

    def schedule_marks(self) -> dict[str, tuple[str, float]]:
        """Each source's schedule and when its current period started (its last firing, or when it was set)."""
        with self.session() as s:
            return {row.source_id: (row.schedule, row.period_started_at) for row in s.scalars(select(ScheduleMark))}

    def mark_schedule(self, source_id: str, schedule: str | None, at: float = 0.0) -> None:
        """Start the source's period of `schedule` at `at` (schedule None: it has none any more)."""
        with self.session() as s:
            if schedule is None:
                s.execute(delete(ScheduleMark).where(ScheduleMark.source_id == source_id))
            else:
                s.merge(ScheduleMark(source_id=source_id, schedule=schedule, period_started_at=at))

    # Embedded runs ---------------------------------------------------------------------------

    def save_run(self, row: RunRow) -> None:
        with self.session() as s:
            s.merge(row)

    def trim_runs(self, source_id: str, keep: int) -> None:
        """Keep the newest `keep` runs of a source (only finished runs are ever old enough to go)."""
        with self.session() as s:
            stale = list(s.scalars(select(RunRow.id).where(RunRow.source_id == source_id,
                                                            RunRow.status.not_in(("pending", "running")))
                                   .order_by(RunRow.created_at.desc()).offset(keep)))
            if stale:
                s.execute(delete(RunRow).where(RunRow.id.in_(stale)))

    def get_run(self, run_id: str) -> RunRow | None:
        with self.session() as s:
            return s.get(RunRow, run_id)

    def list_runs(self, limit: int = 50, source_id: str | None = None) -> list[RunRow]:
        query = select(RunRow).order_by(RunRow.created_at.desc()).limit(limit)
        if source_id is not None:
            query = query.where(RunRow.source_id == source_id)
        with self.session() as s:
            return list(s.scalars(query))
