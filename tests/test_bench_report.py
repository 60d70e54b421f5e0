"""`make bench`'s headline table: every script's FIGURE lines become one row each, ratio against
the bare baseline from the same run."""
from bench.report import collect, figure, table


def test_figures_printed_by_scripts_become_one_table_with_their_ratios(capsys):
    print("bare websocket-client receive loop: 40,000 events/s")  # a human line: not a figure
    figure("ingest, every feature, SQLite", 10_000.0, 40_000.0, "events/s", ">= 0.25")
    figure("RSS steady, every feature, SQLite", 116.4, None, "MiB", "<= 128")
    figure("getFeed in-process median, limit 50", 0.3, 0.2, "ms")
    figures = collect(capsys.readouterr().out)
    assert [f["measure"] for f in figures] == ["ingest, every feature, SQLite", "RSS steady, every feature, SQLite",
                                               "getFeed in-process median, limit 50"]
    assert table(figures) == [
        "measure                                   Feather  bare baseline  ratio     goal",
        "ingest, every feature, SQLite (events/s)   10,000         40,000   0.25  >= 0.25",
        "RSS steady, every feature, SQLite (MiB)       116              –      –   <= 128",
        "getFeed in-process median, limit 50 (ms)     0.30           0.20   1.50        –",
    ]
