"""Periodic jobs (Celery beat): the fleet's sweeper today; per-source syncs and consolidation sweeps next."""
