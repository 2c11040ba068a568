"""`hotfix doctor`'s pure log engine: normalise lines, find each process's first error, match signatures.

No I/O and nothing of the rest of the tool but errors and the manifest model: the command
(commands/doctor.py) reads files, stdin and gzip, and joins the matches with the target's state.
"""

from vllm_hotfix.doctor.engine import EPISODE, HIGH_AT, NAME_AT, Evidence, Findings, Line, Match, scan, scan_text

__all__ = ["EPISODE", "HIGH_AT", "NAME_AT", "Evidence", "Findings", "Line", "Match", "scan", "scan_text"]
