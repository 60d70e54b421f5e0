"""/health is public: it says that a stream, job or task failed and when, never which process owns
it (hostname:pid) or what the error said (an error can name a private host and port). /admin,
for the operator, shows both. The pieces here are published through feather/process/status.py exactly
as a worker process publishes them."""
import json

from feather.db import db
from feather.process import status
from tests.test_sync_views import sign_in

OPERATOR = "did:plc:operator"
SECRET = "secret-host.example:5432 refused"
OWNER = "secret-box.internal:4242"
FAILED_AT = 1_800_000_000.5


def publish_failing_pieces(app) -> None:
    """A stream that never connected, a job failing its last 3 runs and a retrying engine task,
    each with SECRET in its last error, all owned by OWNER."""
    board = status.Board()
    board.owner = OWNER
    stream = board.piece("stream", "global")
    stream.state, stream.last_error, stream.last_error_at = "running", f"connect to {SECRET}", FAILED_AT
    stream.extra = {"connected": False, "ever_connected": False, "idle": None,
                    "host": "wss://jetstream.example/subscribe"}
    job = board.piece("job", "peer-check")
    for _ in range(3):
        job.failed(ConnectionError(SECRET), "peer-check")
    job.last_error_at = FAILED_AT
    task = board.piece("task", "jetstream-engine")
    task.state, task.last_error, task.last_error_at = "retrying", f"OSError: {SECRET}", FAILED_AT
    task.extra = {"subscriptions": ["global"]}
    with app.app_context(), db.connection_context():
        board.publish()


def keys_anywhere(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | set().union(*(keys_anywhere(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(keys_anywhere(v) for v in value))
    return set()


def test_health_says_that_pieces_failed_and_when_but_not_what_the_error_said_or_who_owns_them(make_app):
    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR)
    publish_failing_pieces(app)
    response = app.test_client().get("/health")
    text = response.get_data(as_text=True)
    body = json.loads(text)
    assert "secret-host" not in text and "secret-box" not in text
    assert {"owner", "last_error"} & keys_anywhere(body) == set()
    assert body["status"] == "degraded"
    assert body["reasons"] == ["stream global has not connected to Jetstream",
                               "job peer-check failed its last 3 runs",
                               "background task jetstream-engine is failing and being restarted"]
    stream, job = body["consumers"]["global"], body["jobs"]["peer-check"]
    assert (stream["had_error"], stream["last_error_at"], stream["host"]) == (
        True, FAILED_AT, "wss://jetstream.example/subscribe")
    assert (job["had_error"], job["last_error_at"], job["streak"], job["failures"]) == (True, FAILED_AT, 3, 3)


def test_admin_shows_the_operator_the_owners_and_the_full_last_errors(make_app):
    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR)
    publish_failing_pieces(app)
    client = app.test_client()
    sign_in(app, client, did=OPERATOR, handle="operator.test")
    html = " ".join(client.get("/admin").get_data(as_text=True).split())
    assert f"stream global has not connected to Jetstream (last error: connect to {SECRET})" in html
    assert f"job peer-check failed its last 3 runs (last error: ConnectionError: {SECRET})" in html
    assert ("background task jetstream-engine is failing and being restarted"
            f" (last error: OSError: {SECRET})") in html
    for name in ("global", "peer-check", "jetstream-engine"):
        row = html[html.index(f'<th scope="row">{name}</th>'):]
        row = row[:row.index("</tr>")]
        assert f'<td data-label="Owner">{OWNER}</td>' in row, (name, row)
        assert SECRET in row, (name, row)


def test_a_piece_that_never_failed_says_so_on_health(make_app):
    app = make_app()
    board = status.Board()
    board.piece("job", "tidy").recovered()
    with app.app_context(), db.connection_context():
        board.publish()
    job = app.test_client().get("/health").get_json()["jobs"]["tidy"]
    assert (job["had_error"], job["last_error_at"], job["streak"]) == (False, None, 0)


def test_admin_says_which_disk_rule_guards_the_database(make_app):
    from tests.conftest import PG_URL

    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR)
    client = app.test_client()
    sign_in(app, client, did=OPERATOR, handle="operator.test")
    html = " ".join(client.get("/admin").get_data(as_text=True).split())
    if PG_URL:
        assert ("no size watermark set, and PostgreSQL's disk is not visible from here: set"
                " FEATHERREADER_DB_SIZE_WATERMARK_BYTES.") in html
    else:
        assert "no size watermark set, so writing pauses when its disk has less than the larger of 1 GiB or 5 % free." in html
    app.config["FEATHER"].featherreader_db_size_watermark_bytes = 10**12
    html = " ".join(client.get("/admin").get_data(as_text=True).split())
    assert "no size watermark set" not in html and " watermark (0.0 %)." in html
