"""The copy of a package this process imports (the guard's, and the in-container `verify`'s): install/facts.py's
rule on the facts install/probe.py gathers, in this very process (stdlib only)."""

from __future__ import annotations

import sys


class Installed:
    """The copy of a package this process imports, by install/facts.py's rule (plain class: the guard).
    A checkout's version is what its build would produce (install/facts.release_version, as every command
    derives it: git, so asked only when core.verdict.release_seen needs it); its commit is read from .git."""

    __slots__ = ("package", "package_dir", "root", "distribution", "pending", "kind", "dist_info", "commit",
                 "decided", "derived")

    def __init__(self, package: str, decided, pending: bool) -> None:
        from vllm_hotfix_guard.install.facts import checkout_commit, distribution_of

        self.package, self.decided = package, decided
        self.package_dir, self.root = decided.package_dir, decided.root
        self.kind, self.dist_info = decided.kind, decided.dist_info
        self.distribution = decided.distribution if decided.distribution is not None else distribution_of(decided)
        self.pending, self.commit = pending, checkout_commit(decided)
        self.derived = None

    def _derive(self) -> tuple:
        if self.derived is None:
            from vllm_hotfix_guard.install.facts import release_version

            self.derived = release_version(self.decided, self.package)
        return self.derived

    @property
    def version(self):
        return self._derive()[0]

    @property
    def version_file(self):
        return self._derive()[2]


def installed(package: str):
    """The install this process loads ``package`` from, found without executing it: the facts the probe
    gathers (find_spec, the distributions, editable finders) and the rule every command applies to them
    (install/facts.py), so root, version and pending journal are those `hotfix status` sees."""
    from vllm_hotfix_guard.install import facts as install_facts
    from vllm_hotfix_guard.install import probe
    from vllm_hotfix_guard.paths import TargetDir

    try:
        decided = install_facts.decide(probe.install_facts(package, list(sys.path)))
    except install_facts.NotImportable:
        return None
    return Installed(package, decided, TargetDir.of(decided.root).pending())
