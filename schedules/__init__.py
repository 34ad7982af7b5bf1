"""Periodic jobs (Celery beat): per-source syncs, reconciliations, consolidation sweeps.

Nothing is scheduled yet: the embedded mode runs passes on demand (`headwater sync`) or from
file system events (`headwater watch`). Schedules arrive with the worker fleet.
"""
