"""`hotfix list`: the hotfixes in the catalog, newest version of each (``--json``: every version): a table
fitted to the terminal, or into a pipe one tab-separated line per hotfix (ID, VERSION, TARGET, FIXED IN,
FROM, TITLE)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.catalog.model import Manifest
from vllm_hotfix_guard.output import emit_json, note, say, terminal_width, wrap


def run(*, catalogs: Sequence[Path] = (), as_json: bool = False) -> int:
    catalog = Catalog.load(catalogs)
    latest = set(id(m) for m in catalog.latest())
    if as_json:
        emit_json([dict(summary(m, latest=id(m) in latest), catalog=_origin(catalog, m).to_json())
                   for m in catalog.all()])
        return 0
    width = terminal_width()
    if not catalog.all():
        (say if width is not None else note)("no hotfixes in the catalog")  # a pipe gets no line: no hotfix
        note("add a catalog directory (manifests/ and patches/) with --catalog DIR or HOTFIX_CATALOG")
        return 0
    rows = [("ID", "VERSION", "TARGET", "FIXED IN", "FROM", "TITLE")]
    rows += [(m.id, str(m.version), "; ".join(t.describe() for t in m.targets),
              m.fixed_in.describe() if m.fixed_in else f"{m.fixed_by}+" if m.fixed_by else "-",
              _from(catalog, m), f"[advisory] {m.title}" if m.kind == "advisory" else m.title)
             for m in catalog.latest()]
    if width is None:  # a pipe or a file: one line per hotfix, its fields tab-separated, for cut and awk
        for row in rows[1:]:
            say("\t".join(cell.replace("\t", " ") for cell in row))
        return 0
    for line in table(rows, width):
        say(line)
    older = [f"{hotfix_id} {', '.join(str(v) for v in catalog.versions(hotfix_id)[:-1])}"
             for hotfix_id in catalog.ids() if len(catalog.versions(hotfix_id)) > 1]
    if older:
        say()
        for line in wrap(f"older versions: {'; '.join(older)} (hotfix show ID@VERSION)", width, "  "):
            say(line)
    say()
    for line in wrap("catalogs: " + "; ".join(d.describe() for d in catalog.dirs), width, "  ", first=""):
        say(line)
    return 0


def _origin(catalog: Catalog, manifest: Manifest):
    return catalog.origin(manifest) or catalog.dirs[0]


def _from(catalog: Catalog, manifest: Manifest) -> str:
    """'built-in', or the user catalog's directory (and that it shadows a built-in id)."""
    origin = _origin(catalog, manifest)
    if origin.builtin:
        return "built-in"
    return str(origin.path) + (" (shadows built-in)" if catalog.shadows(manifest) else "")


TITLE_MIN = 30  # narrower than this left for the title, the target and title go on lines of their own


def table(rows: list[tuple[str, ...]], width: int | None) -> list[str]:
    """The catalog table fitted to ``width`` as pip and git fit theirs (None: one line per hotfix).
    Wide enough: the title wraps under its own column. Narrower: ID, VERSION and FIXED IN on the
    row (FIXED IN below it when it does not fit), the target and the title on indented lines below, wrapped."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    prefix = sum(widths) + 2 * len(widths)
    if width is None or prefix + TITLE_MIN <= width:
        lines = []
        for row in rows:
            head = "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  "
            lines += [line.rstrip() for line in wrap(row[-1], width, " " * prefix, first=head)]
        return lines
    short = [(row[0], row[1], row[3]) for row in rows]
    narrow = [max(len(r[i]) for r in short) for i in range(2)]
    lines = []
    for row, cells in zip(rows, short):  # the header too: TARGET and TITLE below ID, VERSION, FIXED IN
        head = ("  ".join(c.ljust(w) for c, w in zip(cells, narrow)) + "  " + cells[2]).rstrip()
        if len(head) <= width:
            lines.append(head)
        else:  # a long FIXED IN (a union of specifier sets) goes below, wrapped at its spaces
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, narrow)).rstrip())
            lines += wrap(f"fixed in {cells[2]}", width, "      ", first="    ")
        lines += wrap(f"{row[2]}  {row[4]}", width, "      ", first="    ")  # target, then where it is from
        lines += wrap(row[-1], width, "      ", first="    ")
    return lines


def summary(manifest: Manifest, *, latest: bool) -> dict[str, Any]:
    return {
        "id": manifest.id,
        "version": manifest.version,
        "kind": manifest.kind,
        "latest": latest,
        "title": manifest.title,
        "targets": [{"distribution": t.distribution, "package": t.package, "versions": t.versions,
                     "git": asdict(t.git) if t.git else None} for t in manifest.targets],
        "fixed_in": asdict(manifest.fixed_in) if manifest.fixed_in else None,
        "supersedes": list(manifest.supersedes),
        "fixed_by": manifest.fixed_by,
        "source": str(manifest.source) if manifest.source else None,
    }
