"""Process entry point: gunicorn imports `app:app`; the flask CLI uses it too.

A configuration error is one line naming the variable (no traceback: the operator needs the name and
what it accepts, not our stack). Under gunicorn the process then stops (exit 3, which gunicorn's
arbiter reads as "worker failed to boot" and does not retry in a loop). Under the flask CLI a stand-in
app offers the commands that need no configuration, so `flask --app app new-oauth-client-key` still
makes the key that the error may be asking for.
"""
from gevent import monkey

monkey.patch_all()  # first: before Flask, peewee, ssl or websocket are imported

import os  # noqa: E402
import sys  # noqa: E402

from feather import create_app  # noqa: E402
from feather.config import ConfigError  # noqa: E402


def _flask_cli() -> bool:
    program = sys.argv[0] if sys.argv else ""
    return os.path.basename(program) in ("flask", "flask.exe") or program.endswith(os.path.join("flask", "__main__.py"))


try:
    app = create_app()
except ConfigError as error:
    print(f"feather: configuration error: {error}", file=sys.stderr, flush=True)
    if not _flask_cli():
        raise SystemExit(3) from None
    from feather.cli import stand_in_app  # noqa: E402

    app = stand_in_app(str(error))
