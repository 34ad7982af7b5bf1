"""Fleet mode: the pipeline as queued steps over Redis, writing to a Chroma server.

Read in this order: `keys` (every Redis key), `state` (the state machine: leases and atomic
transitions), `runs` (run records), `steps` (what each step does), `enqueue` (ways in),
`crash` (named crash points for the tests that prove it).
"""
