"""Path segments: a session or tool name put into a URL path, percent-encoded."""

from __future__ import annotations

from urllib.parse import quote


def _path(value: object) -> str:
    """`value` as one path segment: `/`, `?`, `#`, `%` and the rest encoded."""
    return quote(str(value), safe="")
