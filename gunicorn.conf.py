"""Gunicorn reads this file from the working directory: migrate, then maybe start workers.

Kept out of app.py so that importing the app (tests, the flask CLI) starts nothing.
"""
import re

from gunicorn.glogging import Logger

# One line per request on stdout, beside the app's own log (make run, the Procfile).
accesslog = "-"

# A feed-reader link (/r/<token>.atom, feather/feeds/web/reader_feed.py) is a password in a URL:
# the access log keeps its first four characters only (then ****), in the request line, the path and a Referer.
_READER_LINK = re.compile(r"(/r/)([A-Za-z0-9_-]{4})[A-Za-z0-9_-]*")


def mask_reader_links(text: str) -> str:
    return _READER_LINK.sub(r"\1\2****", text)


class MaskingLogger(Logger):
    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for key in ("r", "U", "f"):
            if isinstance(atoms.get(key), str):
                atoms[key] = mask_reader_links(atoms[key])
        return atoms


logger_class = MaskingLogger
# gunicorn 25+ opens a control socket at one fixed path ($XDG_RUNTIME_DIR or ~/.gunicorn/gunicorn.ctl),
# so a second instance on the machine (another `make run`, the tests, the load bench) collides
# with the first. Feather does not use gunicornc: no control socket.
control_socket_disable = True

_workers = None


def post_worker_init(worker):
    global _workers
    # Here, not at the top: the arbiter reads this file before it forks, and Feather (ssl, peewee)
    # must load in the worker after gunicorn's gevent worker has run monkey.patch_all().
    from feather.process.runtime import start_web_process  # noqa: PLC0415  the worker, after gevent's patch

    _workers = start_web_process(worker.wsgi)


def worker_exit(server, worker):
    if _workers is not None:
        _workers.stop()

# Gunicorn answers a request line over its limit (default 4094) with its own HTML 414. Feeds'
# XRPC methods refuse URLs over 4 KB themselves, in XRPC JSON, so let up to the maximum through.
limit_request_line = 8190
