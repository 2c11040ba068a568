"""Published wheels through the package index the user configured, without pip.

pipx / `uv tool` venvs have no pip, and clusters often reach only a mirror: the index comes from pip's
own configuration, read here with configparser (pip is never run): the files pip reads (global
``$XDG_CONFIG_DIRS/pip/pip.conf`` and ``/etc/pip.conf``, user ``~/.pip/pip.conf`` and
``$XDG_CONFIG_HOME/pip/pip.conf``, then ``PIP_CONFIG_FILE``), sections ``[global]`` then ``[download]``,
then the ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL`` / ``PIP_NO_INDEX`` / ``PIP_CERT`` environment.
Pages are PEP 503 (HTML) or PEP 691 (JSON) simple indexes, read by ``pypi_simple``; ``file://`` indexes
(a directory laid out like one) work too. A wheel is streamed to a temporary file in the cache, hashed
while written, checked against the index's ``#sha256=``, and moved into place only when it matches.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional
from urllib.parse import unquote, urlparse, urlsplit, urlunsplit

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from vllm_hotfix_guard.errors import Unavailable
from vllm_hotfix_guard.output import note, visible
from vllm_hotfix_guard.paths import make_state_dir
from vllm_hotfix_guard.txn.atomic import atomic_write

PYPI_SIMPLE = "https://pypi.org/simple/"
TIMEOUT = 60.0
CHUNK = 1 << 16


@dataclass(frozen=True)
class IndexConfig:
    """The package index pip is configured with (pip.conf, PIP_INDEX_URL)."""

    urls: tuple[str, ...]           # index-url first, then the extra-index-urls; empty with no-index
    cert: str | None = None         # CA bundle (pip's `cert`)
    sources: tuple[str, ...] = ()   # the config files and variables that said so, for messages

    def describe(self) -> str:
        shown = ", ".join(redact(u) for u in self.urls) or "(none: no-index)"
        return shown + (f" (from {', '.join(self.sources)})" if self.sources else "")


def redact(url: str) -> str:
    """The URL without a password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _config_files(environ: dict[str, str]) -> list[Path]:
    home = Path(environ.get("HOME") or Path.home())
    xdg_dirs = [d for d in environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep) if d]
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs)] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf",
              Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "yes", "true", "on")


def index_config(environ: Optional[dict[str, str]] = None) -> IndexConfig:
    """The indexes `pip download` would use here, read from pip's files and environment."""
    environ = dict(os.environ if environ is None else environ)
    values: dict[str, tuple[str, str]] = {}  # key -> (value, where)
    if environ.get("PIP_CONFIG_FILE") != os.devnull:
        for path in _config_files(environ):
            parser = configparser.RawConfigParser()
            try:
                parser.read(path, encoding="utf-8")
            except (configparser.Error, UnicodeDecodeError):
                continue
            for section in ("global", "download"):
                if parser.has_section(section):
                    for key, value in parser.items(section):
                        values[key.replace("_", "-")] = (value, str(path))
    for key in ("index-url", "extra-index-url", "no-index", "cert"):
        env = "PIP_" + key.upper().replace("-", "_")
        if environ.get(env):
            values[key] = (environ[env], env)
    sources = []

    def take(key: str) -> str | None:
        if key not in values:
            return None
        value, where = values[key]
        if where not in sources:
            sources.append(where)
        return value

    index = take("index-url")
    extra = (take("extra-index-url") or "").split()
    no_index = take("no-index")
    urls = () if no_index and _truthy(no_index) else tuple(dict.fromkeys([(index or PYPI_SIMPLE).strip(), *extra]))
    return IndexConfig(urls, take("cert"), tuple(sources))


# --- reading an index -----------------------------------------------------------------------------


@dataclass(frozen=True)
class WheelFile:
    """A wheel an index lists for a release: its file name, URL and sha256."""

    filename: str
    url: str
    sha256: str | None
    version: Version


class Index:
    """The configured indexes, one HTTP session for all requests."""

    def __init__(self, config: IndexConfig | None = None, *, timeout: float = TIMEOUT):
        self.config = config or index_config()
        self.timeout = timeout
        self._session = None

    def _client(self, endpoint: str):
        import requests
        from pypi_simple import PyPISimple

        if self._session is None:
            self._session = requests.Session()
            if self.config.cert:
                self._session.verify = self.config.cert
        return PyPISimple(endpoint, session=self._session)

    def _page(self, endpoint: str, project: str):
        """The project's page on one index, None when that index does not have it."""
        from pypi_simple import NoSuchProjectError, ProjectPage

        name = canonicalize_name(project)
        if urlparse(endpoint).scheme == "file":
            directory = Path(unquote(urlparse(endpoint).path)) / name
            page = directory / "index.html"
            if not page.is_file():
                return None
            return ProjectPage.from_html(name, page.read_bytes(), base_url=page.as_uri())
        try:
            return self._client(endpoint).get_project_page(name, timeout=self.timeout)
        except NoSuchProjectError:
            return None

    def wheels(self, project: str) -> list[WheelFile]:
        """Every non-yanked wheel of ``project`` on the configured indexes (first index first)."""
        return [f for f in self.files(project) if f.filename.endswith(".whl")]

    def files(self, project: str) -> list[WheelFile]:
        """Every non-yanked wheel and ``.tar.gz`` sdist of ``project`` (vllm-ascend publishes most releases
        only as an sdist), first index first."""
        if not self.config.urls:
            raise Unavailable(f"cannot list {project}: pip is configured with no-index",
                              hint="pass the releases with --versions, or put the wheel in the cache (see --wheel)")
        found: list[WheelFile] = []
        errors = []
        for endpoint in self.config.urls:
            try:
                page = self._page(endpoint, project)
            except Exception as exc:  # requests / pypi_simple / OSError: all "could not read the index"
                errors.append(f"{redact(endpoint)}: {_reason(exc)}")
                continue
            for pkg in page.packages if page is not None else ():
                if pkg.is_yanked:
                    continue
                try:
                    if pkg.package_type == "wheel":
                        _, version, _, _ = parse_wheel_filename(pkg.filename)
                    elif pkg.package_type == "sdist" and pkg.filename.endswith(".tar.gz"):
                        _, version = parse_sdist_filename(pkg.filename)
                    else:
                        continue
                except Exception:
                    continue
                found.append(WheelFile(pkg.filename, pkg.url, pkg.digests.get("sha256"), version))
        if not found and errors:
            raise Unavailable(f"cannot read the package index for {project}: {'; '.join(errors)}",
                              hint=f"indexes from pip's configuration: {self.config.describe()}")
        return found

    def releases(self, project: str) -> list[str]:
        """Releases with a wheel or an sdist, oldest first: finals and pre-releases (vllm-ascend's are rcs);
        no dev releases."""
        versions = {w.version for w in self.files(project) if not w.version.is_devrelease}
        return [str(v) for v in sorted(versions)]

    def download(self, project: str, version: str, directory: Path,
                 progress: Callable[[str, Optional[int]], "Progress"] | None = None) -> Path:
        """Download the best wheel of ``project==version`` into ``directory``, else its sdist (a release
        published only so); the sha256 is checked."""
        try:
            wanted = Version(version)
        except InvalidVersion:
            raise Unavailable(f"{version!r} is not a release number") from None
        files = [w for w in self.files(project) if w.version == wanted]
        candidates = [w for w in files if w.filename.endswith(".whl")] or files
        if not candidates:
            raise Unavailable(f"no wheel or sdist of {project} {version} on {self.config.describe()}",
                              hint=f"put it into {directory} yourself, or pass --wheel FILE")
        wheel = _best(candidates) if candidates[0].filename.endswith(".whl") else candidates[0]
        make_state_dir(directory)  # 0o755 whatever the umask
        final = directory / wheel.filename
        fd, tmp_name = tempfile.mkstemp(prefix=".download-", suffix=".part", dir=directory)
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                size, chunks = self._stream(wheel.url)
                with (progress or stderr_progress)(wheel.filename, size) as bar:
                    for chunk in chunks:
                        out.write(chunk)
                        digest.update(chunk)
                        bar.update(len(chunk))
                out.flush()
                os.fsync(out.fileno())
            if wheel.sha256 is None:
                note(f"{redact(wheel.url)} publishes no sha256; downloaded without a check")
            elif digest.hexdigest() != wheel.sha256.lower():
                raise Unavailable(f"{wheel.filename}: sha256 {digest.hexdigest()} does not match the index's "
                                  f"{wheel.sha256}: download discarded",
                                  hint="a broken mirror or proxy? nothing was kept")
            os.chmod(tmp, 0o644)
            if wheel.sha256 is not None:  # the index's word, kept beside the wheel: checked before each use
                atomic_write(sidecar(final), wheel.sha256.lower().encode() + b"\n", 0o644)
            os.replace(tmp, final)
        except Unavailable:
            raise
        except Exception as exc:
            raise Unavailable(f"cannot download {wheel.filename} from {redact(wheel.url)}: {_reason(exc)}",
                              hint="nothing was kept; try again, or download it yourself and pass --wheel FILE") from None
        finally:
            tmp.unlink(missing_ok=True)
        return final

    def index_sha256(self, project: str, filename: str) -> str | None:
        """The sha256 the index gives ``filename`` (None: it gives none, or has no such file). The index
        is read once per project and process. Unavailable when it cannot be read."""
        key = (self.config.urls, project)
        listed = _LISTED.get(key)
        if listed is None:
            listed = _LISTED[key] = {}
            for w in self.files(project):  # the first index that lists a file is the one pip would take
                listed.setdefault(w.filename, w.sha256)
        found = listed.get(filename)
        return found.lower() if found else None

    def _stream(self, url: str) -> tuple[Optional[int], Iterable[bytes]]:
        if urlparse(url).scheme == "file":
            path = Path(unquote(urlparse(url).path))
            handle = path.open("rb")

            def read() -> Iterable[bytes]:
                with handle:
                    yield from iter(lambda: handle.read(CHUNK), b"")
            return path.stat().st_size, read()
        self._client(self.config.urls[0])
        response = self._session.get(url, stream=True, timeout=self.timeout)
        response.raise_for_status()
        length = response.headers.get("Content-Length")

        def body() -> Iterable[bytes]:
            with response:
                yield from response.iter_content(CHUNK)
        return (int(length) if length and length.isdigit() else None), body()


_LISTED: dict[tuple, dict[str, str | None]] = {}  # (index urls, project) -> {wheel file name: sha256}: read once


def sidecar(wheel: Path) -> Path:
    """Where the index's sha256 of a cached wheel is kept: beside it, ``NAME.whl.sha256``."""
    return wheel.with_name(wheel.name + ".sha256")


def _best(candidates: list[WheelFile]) -> WheelFile:
    """The wheel this machine would install (its tags first), else a pure one, else the first by name."""
    from packaging.tags import sys_tags

    order = {tag: i for i, tag in enumerate(sys_tags())}

    def rank(w: WheelFile) -> tuple[int, str]:
        _, _, _, tags = parse_wheel_filename(w.filename)
        return min((order.get(t, len(order) + 1) for t in tags), default=len(order) + 1), w.filename

    return min(candidates, key=rank)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# --- progress on stderr -----------------------------------------------------------------------------


class Progress:
    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, increment: int) -> None:
        raise NotImplementedError


class LineProgress(Progress):
    """Into a log or a pipe: no bar, one summary line per download once it is done (``output.note``'s
    form: ``hotfix: downloaded NAME (12.3 MB)``); a download that fails says so in its error instead."""

    def __init__(self, name: str, total: Optional[int], stream=None):
        self.name, self.total = name, total
        self.stream = stream
        self.done = 0

    def update(self, increment: int) -> None:
        self.done += increment

    def __exit__(self, exc_type, *rest: object) -> None:
        if exc_type is not None:
            return
        line = f"downloaded {self.name} ({self.done / 1e6:.1f} MB)"
        if self.stream is None:
            note(line)
        else:  # a test's stream: the same line
            self.stream.write(f"hotfix: {visible(line)}\n")


class BarProgress(Progress):
    """A tqdm bar on a terminal."""

    def __init__(self, name: str, total: Optional[int]):
        from tqdm import tqdm

        self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name, file=sys.stderr,
                         leave=True)

    def update(self, increment: int) -> None:
        self._bar.update(increment)

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


def stderr_progress(name: str, total: Optional[int]) -> Progress:
    """A bar when stderr is a terminal, else one summary line per download."""
    return BarProgress(name, total) if sys.stderr.isatty() else LineProgress(name, total)
