"""The feeds' tables and the statements that write them: every feeds table has one module here
that alone writes it (docs/design.md, "Tables by owner"), and every other module of feeds calls
its functions. records.py (the per-collection records tables and feed_tombstones), items.py
(feed_items), served.py (feed_actors, feed_admission_state), backfills.py, fetches.py,
identities.py, prune_state.py, heavy_authors.py and generators.py (one table each); schema.py
creates the records tables, serial.py is the one-writer lock. Imports nothing else of feeds but
the config (.importlinter, feeds-layers)."""
