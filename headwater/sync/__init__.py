"""Embedded mode: the pipeline's stages run in this process against a local Chroma directory.

sync_engine executes a full pass or a set of live changes with the pipeline's functions and
decisions; crawl_pass executes a crawl's discovery decisions (headwater.pipeline.discovery) as a
full pass's listing; embedded opens the store, models and lock for it; watching turns a connector's events
into incremental passes; git_pushes turns a push into the least work that reaches its commit, in
either mode; dead_letters keeps event messages that could not be read.
"""
