"""Fetch one file of a published catalog release: ``https://`` (requests; the CA bundle from ``--ca``, else
requests' own: REQUESTS_CA_BUNDLE, certifi) or ``file://`` (read as input). Bounded: a body larger than
the cap is refused before it is all read (Content-Length, then counted while streaming). A missing file
is None (a signature file that was not made); anything else that fails is Unavailable (exit 10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional
from urllib.parse import quote, unquote, urlsplit

from vllm_hotfix_guard.errors import InvalidInput, Unavailable, UsageError
from vllm_hotfix_guard.inputs import read_bounded

TIMEOUT = 30.0
SCHEMES = ("https", "file")


def check_url(url: str) -> str:
    """``url`` with one trailing slash (the release's directory; an ``oci:/LAYOUT[:TAG]`` reference as it is);
    UsageError for another scheme."""
    if url.startswith("oci:"):
        from vllm_hotfix.catalog.release_oci import split_reference

        split_reference(url)
        return url
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or (parts.scheme == "https" and not parts.hostname):
        raise UsageError(f"{url!r}: expected an https:// or file:// URL of the release's directory, or oci:/LAYOUT[:TAG]",
                         hint="the directory `hotfix catalog publish --to` wrote, served over HTTPS or on this host")
    if parts.query or parts.fragment or "\x00" in url:
        raise UsageError(f"{url!r}: a catalog URL has no query or fragment")
    return url if url.endswith("/") else url + "/"


def redact(url: str) -> str:
    """The URL without user information (a token in it is never printed)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return url.replace(parts.netloc, parts.netloc.rsplit("@", 1)[1], 1)


def where(base: str, name: str) -> str:
    """How a file of a release is named in messages (no user information of a URL)."""
    return f"{base} {name}" if base.startswith("oci:") else redact(base) + name


def fetch(base: str, name: str, *, cap: int, ca: Optional[str] = None, session=None) -> Optional[bytes]:
    """The bytes of ``name`` in the release directory ``base`` (check_url's); None when it is not there."""
    if base.startswith("oci:"):
        from vllm_hotfix.catalog.release_oci import fetch_blob

        try:
            return fetch_blob(base, name, cap=cap)
        except FileNotFoundError as exc:
            raise Unavailable(f"{base}: {exc.filename}: missing from the layout") from None
        except OSError as exc:
            raise Unavailable(f"{base}: cannot read: {exc.strerror}") from None
    url = base + quote(name)
    if urlsplit(base).scheme == "file":
        path = Path(unquote(urlsplit(url).path))
        try:
            return read_bounded(path, cap=cap, what="catalog release file")
        except FileNotFoundError:
            return None
        except InvalidInput:
            raise
        except OSError as exc:
            raise Unavailable(f"{path}: cannot read: {exc.strerror}") from None
    return _https(url, cap=cap, ca=ca, session=session)


def session():
    import requests

    return requests.Session()


def _https(url: str, *, cap: int, ca: Optional[str], session) -> Optional[bytes]:
    import requests

    shown = redact(url)
    try:
        getter = session.get if session is not None else requests.get
        response = getter(url, stream=True, timeout=TIMEOUT, verify=ca if ca else True, allow_redirects=False)
    except requests.exceptions.SSLError as exc:
        raise Unavailable(f"{shown}: TLS verification failed ({_reason(exc)})",
                          hint="give the server's CA bundle with --ca FILE (or REQUESTS_CA_BUNDLE)") from None
    except (requests.RequestException, OSError) as exc:
        raise Unavailable(f"{shown}: cannot fetch ({_reason(exc)})") from None
    with response:
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise Unavailable(f"{shown}: HTTP {response.status_code}")
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise InvalidInput(f"{shown}: {declared} bytes, more than the cap of {cap}")
        body = bytearray()
        try:
            for chunk in response.iter_content(1 << 16):
                body += chunk
                if len(body) > cap:
                    raise InvalidInput(f"{shown}: more than the cap of {cap} bytes")
        except (requests.RequestException, OSError) as exc:
            raise Unavailable(f"{shown}: the download broke off ({_reason(exc)})") from None
    return bytes(body)


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
