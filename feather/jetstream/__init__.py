"""The ingest engine: Jetstream sockets, batches and cursors (docs/design.md, "The ingest engine").

events.py decodes a frame (pure); consumer.py is a stream's socket loop and writer.py its batch
writer, sharing a StreamState (state.py) and a Tuning (tuning.py); store.py is the one transaction
per batch and alone writes the cursors; engine.py owns the streams, membership, claims and the disk
watermark. dev.py is the development tool that injects a hand-made event. The engine knows
subscriptions (subscriptions.py), never the features that declare them.
"""
