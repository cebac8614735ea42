"""Text from records (which may come from anyone: a results folder sent by someone else) made safe to show.

Markdown: every character Markdown or the HTML inside it would act on is escaped, so a field is shown as the
text it is and never becomes a link, an image, markup or raw HTML. Links: only to files, as relative or
absolute paths (never a URL with a scheme such as ``javascript:`` or ``http:``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|])")  # emphasis, code, links and images, table cells


def md(x: Any) -> str:
    """``x`` as literal Markdown text (one line: newlines become spaces; ``<``/``>``/``&`` as HTML entities)."""
    text = " ".join(str(x).split("\n"))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def file_href(path: Any) -> str | None:
    """A link target for a file path (percent-encoded), or None when ``path`` is not a plain file path (a URL
    with a scheme: ``javascript:``, ``data:``, ``http:``...; or not text)."""
    if not isinstance(path, str) or not path.strip():
        return None
    p = path.strip()
    if _SCHEME.match(p) and not re.match(r"^[A-Za-z]:[\\/]", p):  # C:\... is a Windows path, not a scheme
        return None
    if any(ord(c) < 32 for c in p):
        return None
    href = quote(p.replace("\\", "/"), safe="/._-~")
    return "./" + href if _SCHEME.match(href) else href
