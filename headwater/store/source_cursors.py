"""Durable per-source state beside the sources: a source's cursor (a git source's synced commit) and the
webhook deliveries already taken, kept in the same database as the sources (SQLite or PostgreSQL).

A cursor says where the next incremental change starts: for a git source, the commit whose files
the collection holds (embedded) or whose changes were queued (fleet). A delivery id is inserted
once; a second insert of the same id fails on the primary key, which is what makes a redelivered
or replayed webhook a no-op even when two serve processes receive it at once. An id whose push was
not queued, or failed, is released again, so that a redelivery of it is taken.
"""

from __future__ import annotations

import time

from sqlalchemy import Float, String, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from headwater.settings import Settings
from headwater.store.source_store import Base, SourceStore


class CursorRow(Base):
    __tablename__ = "headwater_source_cursors"

    source_id: Mapped[str] = mapped_column(String(500), primary_key=True)
    cursor: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # Why the source is not following its events right now (its branch was deleted), else empty.
    note: Mapped[str] = mapped_column(String(500), default="")
    updated_at: Mapped[float] = mapped_column(Float)


class DeliveryRow(Base):
    __tablename__ = "headwater_webhook_deliveries"

    delivery_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    received_at: Mapped[float] = mapped_column(Float, index=True)


class CursorStore:
    """Cursors and seen deliveries, in the SourceStore's database."""

    def __init__(self, store: SourceStore) -> None:
        self.store = store
        Base.metadata.create_all(store.engine, tables=[CursorRow.__table__, DeliveryRow.__table__])
        self._last_trim = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> CursorStore:
        return cls(SourceStore.from_settings(settings))

    def get(self, source_id: str) -> CursorRow | None:
        with self.store.session() as s:
            return s.get(CursorRow, source_id)

    def all(self) -> dict[str, CursorRow]:
        with self.store.session() as s:
            return {row.source_id: row for row in s.scalars(select(CursorRow))}

    def set(self, source_id: str, cursor: str | None, note: str = "") -> None:
        with self.store.session() as s:
            row = s.get(CursorRow, source_id)
            if row is None:
                s.add(CursorRow(source_id=source_id, cursor=cursor, note=note, updated_at=time.time()))
            else:
                row.cursor, row.note, row.updated_at = cursor, note, time.time()

    def mark(self, source_id: str, note: str) -> None:
        """Keep the cursor, say why the source stopped following its events."""
        row = self.get(source_id)
        self.set(source_id, row.cursor if row else None, note)

    def first_delivery(self, delivery_id: str, ttl_seconds: float) -> bool:
        """Whether this delivery id is new (and now remembered); False for a redelivery or a replay."""
        now = time.time()
        try:
            with self.store.session() as s:
                s.add(DeliveryRow(delivery_id=delivery_id[:100], received_at=now))
        except IntegrityError:
            return False
        if now - self._last_trim > 3600:  # forget old ids now and then, not on every delivery
            self._last_trim = now
            with self.store.session() as s:
                s.execute(delete(DeliveryRow).where(DeliveryRow.received_at < now - ttl_seconds))
        return True

    def release_delivery(self, delivery_id: str) -> None:
        """Forget a delivery id whose push was not queued or not applied, so that a redelivery is taken."""
        with self.store.session() as s:
            s.execute(delete(DeliveryRow).where(DeliveryRow.delivery_id == delivery_id[:100]))
