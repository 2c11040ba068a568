"""Subscribed catalogs: what `hotfix catalog add` recorded and the release `hotfix catalog update` cached.

The layout under the state directory (paths.feeds_dir), each folder owned by this user, mode 0755::

    feeds/<NAME>/subscription.json     {"schema": 1, "name", "url", "trust", "ca"}: written by `add`
    feeds/<NAME>/release/              the cached release, written whole (txn/staged.py) by `update`:
        release.json, release.json.minisig / release.json.<KEYID>.minisig, catalog/manifests/..., catalog/patches/...

Every command sees a cached catalog as it sees --catalog (catalog/index.Catalog.load) while its
release has not expired; past ``expires`` it is stale: not served (a withheld update must not keep a
host on an old catalog for ever: freeze), one note on stderr, and `hotfix status` / `hotfix catalog
list` say so. Its files were checked against the signed metadata when `update` wrote them; the state
tree's trust rule (paths.check_trusted, the owner rule on each file read) keeps others from planting one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from vllm_hotfix_guard import paths
from vllm_hotfix.catalog.release import METADATA, METADATA_LIMIT, Release, parse
from vllm_hotfix_guard.core import trust_policy
from vllm_hotfix_guard.core.docfields import Fields
from vllm_hotfix_guard.errors import UsageError
from vllm_hotfix_guard.values import Value

SUBSCRIPTION = "subscription.json"
RELEASE_DIR = "release"
CATALOG_DIR = "catalog"
SUBSCRIPTION_LIMIT = 64 << 10
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}\Z")


class Subscription(Value):
    name: str
    url: str
    trust: str  # the trust policy's absolute path, read at every update
    ca: Optional[str] = None  # a CA bundle for HTTPS (else requests' default / REQUESTS_CA_BUNDLE)

    def to_json(self) -> dict:
        return {"schema": 1, "name": self.name, "url": self.url, "trust": self.trust, "ca": self.ca}


class Cached(Value):
    """A subscription and the release cached for it (None: never updated)."""

    subscription: Subscription
    release: Optional[Release] = None

    @property
    def catalog(self) -> Path:
        return feed_dir(self.subscription.name) / RELEASE_DIR / CATALOG_DIR

    def stale(self, now: float) -> bool:
        return self.release is not None and now >= trust_policy.parse_utc(self.release.expires)

    def to_json(self, now: float) -> dict:
        return {"name": self.subscription.name, "url": self.subscription.url, "trust": self.subscription.trust,
                "release": self.release.to_json() if self.release else None, "stale": self.stale(now),
                "catalog": str(self.catalog) if self.release else None}


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(f"{name!r}: a catalog name is 1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit")
    return name


def feed_dir(name: str) -> Path:
    return paths.feeds_dir() / check_name(name)


def release_dir(name: str) -> Path:
    return feed_dir(name) / RELEASE_DIR


def dump_subscription(subscription: Subscription) -> bytes:
    return (json.dumps(subscription.to_json(), sort_keys=True, indent=1) + "\n").encode("utf-8")


def read_subscription(name: str) -> Optional[Subscription]:
    directory = feed_dir(name)
    paths.check_trusted(paths.feeds_dir(), directory)
    data = _own(directory / SUBSCRIPTION, SUBSCRIPTION_LIMIT)
    if data is None:
        return None
    from vllm_hotfix_guard.core.data import load_json

    source = str(directory / SUBSCRIPTION)
    fields = Fields(source)
    doc = fields.mapping(load_json(data, source), "")
    if doc.get("schema") != 1 or fields.text(doc, "", "name", limit=64) != name:
        raise fields.fail("name", f"expected schema 1 and name {name!r}")
    return Subscription(name=name, url=fields.text(doc, "", "url"), trust=fields.text(doc, "", "trust"),
                        ca=fields.text(doc, "", "ca", required=False))


def read_cached(name: str) -> tuple[Optional[bytes], Optional[Release]]:
    """The cached release's metadata bytes and values (None, None: nothing cached)."""
    directory = release_dir(name)
    paths.check_trusted(directory, directory / CATALOG_DIR)
    data = _own(directory / METADATA, METADATA_LIMIT)
    if data is None:
        return None, None
    return data, parse(data, str(directory / METADATA))


def _own(path: Path, limit: int) -> Optional[bytes]:
    """One of our files under feeds/ (paths.read_own_file, the owner rule); None when it or a folder on the way is
    missing (a state directory under a file is no subscription)."""
    try:
        return paths.read_own_file(path, limit=limit, owned=True)
    except NotADirectoryError:
        return None


def names() -> list[str]:
    """The subscribed names, sorted (a folder without subscription.json is not one)."""
    root = paths.feeds_dir()
    paths.check_trusted(root)  # first: a state directory this user cannot search is exit 6, not a traceback
    if not root.is_dir():
        return []
    return sorted(n for n in (p.name for p in root.iterdir()) if _NAME.match(n) and (root / n / SUBSCRIPTION).exists())


def subscribed() -> list[Cached]:
    out = []
    for name in names():
        subscription = read_subscription(name)
        if subscription is not None:
            out.append(Cached(subscription=subscription, release=read_cached(name)[1]))
    return out


def served(now: float) -> tuple[list[Cached], list[Cached]]:
    """(fresh, stale) subscriptions with a cached release: the fresh ones are catalogs every command loads."""
    fresh, stale = [], []
    for cached in subscribed():
        if cached.release is not None:
            (stale if cached.stale(now) else fresh).append(cached)
    return fresh, stale


def stale_line(cached: Cached) -> str:
    from vllm_hotfix_guard.output import quote_path

    return (f"subscribed catalog {cached.subscription.name} is stale: its release {cached.release.version} expired at "
            f"{cached.release.expires} and is not used; run `hotfix catalog update {quote_path(cached.subscription.name)}`")
