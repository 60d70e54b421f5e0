"""Hostile input: each parser of outside bytes on its worst known shape at n and 2n bytes.

    python bench/hostile.py [--kib 256] [--repeat 3] [--target-ms 200]

Prints one row per parser: the time at n and at 2n and their ratio. Linear work doubles (about
2×), quadratic work quadruples (about 4×); a parser that refuses by length first stays near 1×.
The baseline row is str.count over the same bytes, a linear scan in C measured in this run, so
the machine's own "2×" is on the table beside the parsers'. Each time is the best of --repeat
runs of a loop doubled until it lasts --target-ms.

The last line is a FIGURE for `make bench`: the worst parser ratio against the baseline's.
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import timeit
from pathlib import Path

from flask import Flask
from requests.structures import CaseInsensitiveDict

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.report import figure  # noqa: E402
from feather.atproto import syntax  # noqa: E402
from feather.atproto.identity import IdentityResolver  # noqa: E402
from feather.auth.service import _jwt_exp  # noqa: E402
from feather.feeds.config import load  # noqa: E402
from feather.feeds.read import cursor, query  # noqa: E402
from feather.feeds.web.publish import check_text  # noqa: E402
from feather.feeds.web.service_auth import verify  # noqa: E402
from feather.jetstream.events import decode  # noqa: E402
from feather.outbound import FetchResponse  # noqa: E402
from feather.parsing import ascii_int, json_depth_ok, loads_limited  # noqa: E402
from feather.security import DepthLimitedJSON  # noqa: E402
from feather.sync.api import parse_apps  # noqa: E402

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
LINEAR_GOAL = "<= 1.5"  # worst ratio / baseline ratio: about 1 when linear, about 2 when quadratic


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _OneDocument:
    """The resolver's HTTP client, answering every fetch with one body (no network)."""

    allow_private_network = False

    def __init__(self, body: bytes):
        self.body = body

    def get(self, url, **kwargs):
        return FetchResponse(200, CaseInsensitiveDict(), self.body, url, ())


def _quietly(call):
    def run():
        try:
            call()
        except Exception:  # every shape here is refused: the refusal is what is timed
            pass
    return run


def _frame(items: str) -> bytes:
    """A valid commit whose record holds a list of items: orjson and then the depth check read it all."""
    return ('{"did":"did:plc:a","time_us":1,"kind":"commit","commit":{"operation":"create","collection":'
            '"app.bsky.feed.post","rkey":"r","cid":"c","record":{"a":[%s0]}}}' % items).encode()


def on(fn, build):
    """n -> a call of fn on build(n), the input built before the clock starts."""
    def make(n):
        data = build(n)
        return lambda: fn(data)
    return make


def cases(workdir: Path):
    """(parser, shape, n -> a zero-argument call doing that parser's work on n bytes)."""
    provider = DepthLimitedJSON(Flask("bench"))

    def did_document(n):
        body = json.dumps({"id": DID, "verificationMethod": [
            {"id": "#atproto", "type": "Multikey", "publicKeyMultibase": "z" + "2" * n}]}).encode()

        def run():
            resolver = IdentityResolver(_OneDocument(body), plc_url="https://plc.invalid", txt_lookup=lambda n: [])
            resolver.signing_key(DID)
        return run

    def config(n):
        path = workdir / f"feeds-{n}.toml"
        path.write_text("\n".join(f"k{i}" + ".a" * 63 + " = 1" for i in range(n // 140)))
        return lambda: load(str(path))

    def verify_token(text):
        return verify(text, audience="did:web:x", method="a.b.getFeed", key_of=lambda did: None)

    return [
        ("loads_limited", '"\\ repeated', on(loads_limited, lambda n: '"\\' * (n // 2))),
        ("json_depth_ok", "[] repeated", on(json_depth_ok, lambda n: "[]" * (n // 2))),
        ("FetchResponse.json", '"\\ repeated',
         on(lambda body: FetchResponse(200, {}, body, "u", ()).json(), lambda n: b'"\\' * (n // 2))),
        ("Flask JSON provider", "[ repeated", on(provider.loads, lambda n: b"[" * n)),
        ("feeds.auth.verify", "header of [", on(verify_token, lambda n: b64(b"[" * (n * 3 // 4)) + ".e30.AA")),
        ("auth.service _jwt_exp", '"\\ repeated',
         on(lambda t: _jwt_exp(t, 0), lambda n: "e30." + b64(b'"\\' * (n * 3 // 8)))),
        ("DID document key", "base58 key", did_document),
        ("syntax.did_web_host", "%3A repeated", on(syntax.did_web_host, lambda n: "did:web:" + "%3A" * (n // 3))),
        ("syntax.parse_at_uri", "a/ repeated", on(syntax.parse_at_uri, lambda n: "at://" + "a/" * (n // 2))),
        ("syntax.parse_datetime", "fraction digits",
         on(syntax.parse_datetime, lambda n: "2025-01-01T00:00:00." + "1" * n + "Z")),
        ("cursor.decode", '"\\ repeated', on(lambda c: cursor.decode(c, "time"), lambda n: b64(b'"\\' * (n * 3 // 8)))),
        ("query.parse_limit", "digits", on(query.parse_limit, lambda n: "9" * n)),
        ("jetstream decode", "record of [] pairs", on(decode, lambda n: _frame("[]," * (n // 3)))),
        ("ascii_int", "digits", on(ascii_int, lambda n: "1" * n)),
        ("sync parse_apps", ", repeated", on(parse_apps, lambda n: ["a," * (n // 2)])),
        ("publish check_text", "joined emoji",
         on(lambda t: check_text(t, ""), lambda n: "\U0001f469\u200d" * (n // 8))),
        ("feeds config load", "keys of 64 parts", config),
    ]


def best(call, repeat: int, target: float) -> float:
    """Seconds per call: the best of repeat loops, each doubled until it lasts target seconds."""
    timer, loops = timeit.Timer(_quietly(call)), 1
    while timer.timeit(loops) < target:
        loops *= 2
    return min(timer.repeat(repeat, loops)) / loops


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=200.0, help="how long each timed loop lasts at least")
    args = ap.parse_args()
    n, target = args.kib * 1024, args.target_ms / 1000
    print(f"hostile input at n = {args.kib} KiB and 2n, best of {args.repeat}: ratio t(2n)/t(n), "
          "linear about 2×, quadratic about 4×")
    print(f"{'parser':24s} {'shape':18s} {'t(n) ms':>10s} {'t(2n) ms':>10s} {'ratio':>11s}", flush=True)
    def row(parser: str, shape: str, make) -> float:
        at_n, at_2n = best(make(n), args.repeat, target), best(make(2 * n), args.repeat, target)
        print(f"{parser:24s} {shape:18s} {at_n * 1e3:10.3f} {at_2n * 1e3:10.3f} {at_2n / at_n:10.2f}×", flush=True)
        return at_2n / at_n

    with tempfile.TemporaryDirectory() as tmp:
        baseline = row("baseline str.count", "any", on(lambda s: s.count('"'), lambda n: '"\\' * (n // 2)))
        worst = max(row(*case) for case in cases(Path(tmp)))
    figure(f"hostile parsers, worst t(2n)/t(n) at {args.kib} KiB", worst, baseline, "×", LINEAR_GOAL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
