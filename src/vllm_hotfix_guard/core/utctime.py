"""Times in locks, policies and catalog releases: RFC 3339 in UTC (``YYYY-MM-DDTHH:MM:SSZ``), on the stdlib
without datetime. Apart from the verifier (core/trust_policy.py re-exports them): the guard reads a lock's
``expires`` in every vLLM process, and a process that finds its trust verdict in the cache imports nothing
of the verifier. No imports.
"""

from __future__ import annotations


def parse_utc(text: str) -> int | None:
    """``YYYY-MM-DDTHH:MM:SSZ`` -> seconds since the epoch; None when ``text`` is not exactly that."""
    if len(text) != 20 or text[4] != "-" or text[7] != "-" or text[10] != "T" or text[13] != ":" \
            or text[16] != ":" or text[19] != "Z":
        return None
    parts = (text[0:4], text[5:7], text[8:10], text[11:13], text[14:16], text[17:19])
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    year, month, day, hour, minute, second = (int(p) for p in parts)
    if not (1970 <= year <= 9999 and 1 <= month <= 12 and hour < 24 and minute < 60 and second < 60):
        return None
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= day <= (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]:
        return None
    return _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second


def format_utc(seconds: int) -> str:
    """Seconds since the epoch -> ``YYYY-MM-DDTHH:MM:SSZ``."""
    days, rest = divmod(int(seconds), 86400)
    year, month, day = _civil_from_days(days)
    return f"{year:04d}-{month:02d}-{day:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}Z"


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    doe = days - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (month <= 2), month, day
