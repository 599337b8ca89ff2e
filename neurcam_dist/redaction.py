"""Credentials never leave the process in text: URIs with a user and password (``http://user:secret@host``,
``s3://KEY:SECRET@bucket``) are shown and saved with the credentials replaced by ``***``."""
from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s\"']+)@")
SECRET_QUERY = re.compile(r"(?i)([?&](?:access_key|secret_key|secret|password|token|session_token|"
                          r"aws_access_key_id|aws_secret_access_key)=)[^&\s\"']*")


def redact(text) -> str:
    """``text`` with every URI's user information and secret query values replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}***@", str(text))
    return SECRET_QUERY.sub(lambda m: f"{m.group(1)}***", text)


def split_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """``(uri without user information, user, password)``; user and password are None when absent."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri, None, None
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return clean, user, password
