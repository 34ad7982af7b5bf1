"""The Celery side of the fleet: the app (built at start-up), thin tasks over headwater.fleet.steps, worker start-up.

Only this package and schedules/ import Celery. The stages themselves are plain functions in
headwater.pipeline; the steps that run them one document at a time, with leases and transitions in
Redis, are in headwater.fleet. workers/README.md says which pool serves which queue.
"""
