"""The process runtime: what a gunicorn worker or `flask worker` runs beside the app, and how it reports.

    runtime     start-up: migrate, then run the workers if this process may (gunicorn.conf.py, feather/cli.py)
    workers     who runs the background work (a file lock on SQLite, advisory-lock claims on PostgreSQL),
                and the Jetstream engine, the scheduler and the status publisher of one process
    scheduler   the features' jobs (feather.features.Job) on APScheduler, each run supervised
    supervisor  restart with backoff, one traceback per failure streak (Piece)
    status      each piece's state, published to worker_status for /health and /admin (Board)
    verdict     from the published rows to "is the service doing its work?" (pure)

It reaches the features only through the registry (feather/features.py), and no feature imports it:
what both sides need (Job, the claim keys and lease holders of feather/locks.py) lives outside.
"""
