"""`hotfix bake`: write a build context (Containerfile + vllm-hotfix/bake.sh) for a derived image with
the hotfixes applied and verified at build time: the immutable route for fleets and for patches too
big for ConfigMaps."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional, Sequence

from vllm_hotfix import __version__
from vllm_hotfix.containers import bake
from vllm_hotfix.errors import UsageError, WriteFailed
from vllm_hotfix.output import emit_json, say


def run(*, hotfix_ids: Sequence[str], base: str, out_dir: Path, wheel: Optional[Path] = None,
        catalogs: Sequence[Path] = (), patch_files: Sequence[Path] = (), python: str = "python3",
        strict: bool = True, as_json: bool = False) -> int:
    from vllm_hotfix.catalog.index import Catalog, parse_ref

    if not base.strip() or any(c.isspace() for c in base):
        raise UsageError(f"--base must be an image reference, got {base!r}")
    catalog = Catalog.load(tuple(catalogs))
    for ref in hotfix_ids:
        catalog.get(*parse_ref(ref))  # an unknown id fails here, not in the middle of a build
    context = out_dir / bake.CONTEXT_DIR
    copies: dict[str, Path] = {}
    if wheel is not None:
        if not wheel.name.endswith(".whl"):
            raise UsageError(f"--wheel {wheel}: not a wheel file")
        copies[f"wheels/{wheel.name}"] = wheel
    names = []
    for i, directory in enumerate(catalogs):
        names.append(f"catalog-{i}")
        copies[names[-1]] = directory
    patches = []
    for path in patch_files:
        patches.append(f"patch-files/{path.name}")
        copies[patches[-1]] = path
    spec = bake.Bake(base=base, hotfix_ids=tuple(hotfix_ids),
                     install=f"wheels/{wheel.name}" if wheel is not None else f"vllm-hotfix=={__version__}",
                     catalogs=tuple(names), patch_files=tuple(patches), python=python, strict=strict,
                     generator=f"vllm-hotfix {__version__}")
    try:
        if context.exists():
            shutil.rmtree(context)
        context.mkdir(parents=True)
        (out_dir / "Containerfile").write_text(bake.containerfile(spec), encoding="utf-8")
        (context / "bake.sh").write_text(bake.script(spec), encoding="utf-8")
        (context / "bake.sh").chmod(0o755)
        for rel, source in copies.items():
            dest = context / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", ".git"))
            else:
                shutil.copy2(source, dest)
    except OSError as exc:
        raise WriteFailed(f"{getattr(exc, 'filename', None) or out_dir}: cannot write the build context: {exc.strerror}") from None
    if as_json:
        emit_json({"context": str(out_dir), "containerfile": str(out_dir / "Containerfile"), "base": base,
                   "hotfixes": list(hotfix_ids), "install": spec.install})
        return 0
    say(f"wrote {out_dir}/Containerfile and {context}/bake.sh: {', '.join(hotfix_ids)} on {base}")
    say(f"next: docker build -f {out_dir}/Containerfile -t IMAGE {out_dir}")
    return 0
