"""Background work: the first-read backfill, author fetches, the prune tick with its records
sweep, and the tombstone sweep (the feature's jobs, feather/feeds/__init__.py). Named `tasks`,
not `jobs`: feather.feeds.jobs is the feature's hook, which a subpackage of that name would
replace on import. Imports ingest, read and the store; never web."""
