"""Gunicorn reads this file from the working directory: migrate, then maybe start workers.

Kept out of app.py so that importing the app (tests, the flask CLI) starts nothing.
"""
_workers = None


def post_worker_init(worker):
    global _workers
    from feather.runtime import start_web_process

    _workers = start_web_process(worker.wsgi)


def worker_exit(server, worker):
    if _workers is not None:
        _workers.stop()

# Gunicorn answers a request line over its limit (default 4094) with its own HTML 414. Feeds'
# XRPC methods refuse URLs over 4 KB themselves, in XRPC JSON, so let up to the maximum through.
limit_request_line = 8190
