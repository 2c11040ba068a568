"""`hotfix doctor`'s pure log engine: normalise lines, read the log's facts, find each process's first
error, match signatures by evidence tier.

No I/O and nothing of the rest of the tool but errors and the manifest model: the command
(commands/doctor.py) reads files, stdin and gzip, and joins the matches with the target's state.
"""

from vllm_hotfix.doctor.engine import (EPISODE, Evidence, Fact, Findings, Line, Match, Prefilter, Veto, scan,
                                       scan_text)

__all__ = ["EPISODE", "Evidence", "Fact", "Findings", "Line", "Match", "Prefilter", "Veto", "scan", "scan_text"]
