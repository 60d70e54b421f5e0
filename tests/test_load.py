"""Load under ingest (reduced for CI; `make bench` runs the full size): no 5xx, ever."""
import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("split", [False, True], ids=["one-process", "web-plus-worker"])
def test_getfeed_and_network_answer_without_5xx_while_ingest_runs(split):
    from bench.load import run

    out = run(events=15_000, requests=200, concurrency=8, split=split)
    for name, result in out["results"].items():
        assert result["statuses"] == {200: 200}, name
    assert out["ingested_us"] > 0
    assert out["caught_up"] is True
