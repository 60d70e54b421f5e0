"""Ingest: the engine's "global" handler. Events are filtered in memory (admission), decided in
memory (plan), then written set-based (batch, fanout) inside the engine's batch transaction
(apply). Imports the store only."""
