"""The one fact on /admin that no feature reports: the database's size against its watermark.

Timelines, the catalogue and graph sync hand /admin their figures through the operator_status
hook (feather/features.py), each reading its own tables.
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect


def database(settings) -> dict:
    size = int(sql.one(current_dialect().size_bytes_sql())[0])
    limit = settings.featherreader_db_size_watermark_bytes
    return {"size_bytes": size, "watermark_bytes": limit or None,
            "percent_of_watermark": round(100 * size / limit, 1) if limit else None,
            "engine": current_dialect().name}
