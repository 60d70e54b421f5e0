"""Process entry point: gunicorn imports `app:app`; the flask CLI uses it too."""
from gevent import monkey

monkey.patch_all()  # first: before Flask, peewee, ssl or websocket are imported

from feather import create_app  # noqa: E402

app = create_app()
