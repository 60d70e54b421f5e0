"""The feeds config of the app serving this request: one helper for every view module.

Set once by init_app (app.extensions["feeds"]); the records tables it names were made when the
process started (feather.feeds.ensure_schema), so a request never runs DDL.
"""
from __future__ import annotations

from flask import current_app

from feather.feeds.config import FeedsConfig


def config() -> FeedsConfig:
    return current_app.extensions["feeds"]
