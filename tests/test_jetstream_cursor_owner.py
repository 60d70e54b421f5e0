"""The cursor table's one owner (feather/jetstream/store.py): saves only move forward, a rewind
only moves back, listings are by name prefix, and a forgotten cursor is gone."""
from __future__ import annotations


def _saved(name):
    from feather.jetstream import store

    found = store.load_cursor(name)
    return None if found is None else (found.time_us, found.seq)


def test_save_moves_forward_and_rewind_moves_back_never_the_other_way(app):
    from feather.jetstream import store

    with app.app_context():
        store.save_cursor("sync:0", store.Cursor(900, 77))
        store.save_cursor("sync:0", store.Cursor(400, 10))  # an older save arriving late
        assert _saved("sync:0") == (900, 77)
        assert store.rewind_cursor("sync:0", 1_000) is False  # a rewind never moves a cursor forward
        assert _saved("sync:0") == (900, 77)
        assert store.rewind_cursor("sync:0", 500) is True
        assert _saved("sync:0") == (500, None)  # the sequence of the undone position goes too
        assert store.rewind_cursor("sync:7", 300) is True  # a shard with no row gets one
        assert _saved("sync:7") == (300, None)


def test_cursor_rows_lists_by_prefix_and_forget_removes_one(app):
    from feather.jetstream import store

    with app.app_context():
        for name, time_us in (("network", 5), ("sync:1", 6), ("sync:0", 7), ("syncx", 8)):
            store.save_cursor(name, store.Cursor(time_us))
        store.set_paused("sync:1", "disk")
        assert [(c.name, c.time_us, c.paused_reason) for c in store.cursor_rows("sync:")] == [
            ("sync:0", 7, None), ("sync:1", 6, "disk")]
        assert [c.name for c in store.cursor_rows()] == ["network", "sync:0", "sync:1", "syncx"]
        store.forget_cursor("network")
        assert _saved("network") is None
        assert [c.name for c in store.cursor_rows()] == ["sync:0", "sync:1", "syncx"]
