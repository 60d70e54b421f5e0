"""The feeds' tables and the statements that own them: the per-collection records tables and
their schema, the one-writer lock, who is served, and the small bookkeeping rows more than one
role writes. Imports nothing else of feeds but the config (.importlinter, feeds-layers)."""
