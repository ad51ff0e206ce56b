"""The moment the program and the policy judge time-dependent things at, and how a time is written.

`pulumi up` runs at the real now. `gpulease plan --now TIME` runs the very same program under
the planner's mocks as of TIME (``gpulease.planner.mocks.run_program`` sets it for the run), so
the decision (``gpulease.policy.decide(now=...)``: which quotes are fresh, whether a window is
still ahead) and the offline lookups answer for the same moment.
"""
from __future__ import annotations

import datetime as dt
import re
from typing import Optional, Union

UTC = dt.timezone.utc

#: The times gpulease accepts anywhere (config, flags, the quote cache, tags nodes write), the
#: one range check: from the Unix epoch (both clouds write their own times after it: EC2
#: LaunchTime, GCE creationTimestamp; epoch-second tags are non-negative) up to the end of 2099
#: (no cloud sells capacity decades ahead: a Capacity Block starts within 8 weeks, a GCP
#: calendar-mode reservation within a year). The margin keeps every later step (a 182-day
#: block, a horizon, a format) inside what a calendar can write: `9999-12-31T23:59:59-01:00`
#: is the year 10000 in UTC and crashed the CLI before this check.
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=UTC)
LATEST = dt.datetime(2099, 12, 31, 23, 59, 59, tzinfo=UTC)

#: RFC 3339 section 5.6 date-time: full-date "T" full-time with seconds and a zone (Z or a
#: +hh:mm / -hh:mm offset); a fraction of a second is allowed. Nothing else: no zone-less times,
#: no ISO 8601 week dates or ordinal dates, no basic format (20270104T000000Z), no bare hours.
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?"
                      r"([Zz]|[+-]\d{2}:\d{2})", re.ASCII)
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
EXAMPLE = "2027-01-04T00:00:00Z"


class TimeError(ValueError):
    """A time gpulease cannot accept; the message says why and shows a good one."""


class TooLate(TimeError):
    """A well-formed time after LATEST: where "in the future" has a meaning (a tag a node or a
    hand wrote), callers may treat it as that rather than as unreadable."""


def parse_time(text: object, *, date_ok: bool = False) -> dt.datetime:
    """The one way gpulease reads a time: RFC 3339 with a zone (``2027-01-04T00:00:00Z``,
    ``2027-01-04T01:00:00+01:00``) -> aware UTC datetime inside [EARLIEST, LATEST].
    ``date_ok``: a bare ``YYYY-MM-DD`` is also accepted, as midnight UTC (where the reference
    documents it). Raises :class:`TimeError` (a ValueError) saying what is wrong; callers name
    the file or flag and the field."""
    if not isinstance(text, str):
        raise TimeError(f"{text!r} is not a time: write an RFC 3339 string with a zone, "
                        f'quoted, e.g. "{EXAMPLE}"')
    s = text
    m = _RFC3339.fullmatch(s)
    if m is None:
        d = _DATE.fullmatch(s) if date_ok else None
        if d is None:
            raise TimeError(_why_not(text, date_ok))
        parts, frac, zone = [int(x) for x in d.groups()] + [0, 0, 0], None, "Z"
    else:
        parts, frac, zone = [int(x) for x in m.groups()[:6]], m.group(7), m.group(8)
    year, month, day, hour, minute, second = parts
    if second == 60:
        raise TimeError(f"{text!r} names a leap second; write :59 (Python and both clouds' APIs "
                        "have no second 60)")
    if zone in ("Z", "z"):
        tz = UTC
    else:
        oh, om = int(zone[1:3]), int(zone[4:6])
        if oh > 23 or om > 59:
            raise TimeError(f"{text!r} has an offset {zone} no zone has (at most +/-23:59)")
        sign = 1 if zone[0] == "+" else -1
        tz = dt.timezone(sign * dt.timedelta(hours=oh, minutes=om))
    try:
        micro = int((frac[1:] + "000000")[:6]) if frac else 0
        local = dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError as exc:
        raise TimeError(f"{text!r} is not a calendar time ({exc})") from None
    # the range check before any conversion: 0001-01-01T00:00:00+01:00 is the year 0 in UTC
    if not EARLIEST.year - 1 <= year <= LATEST.year + 1:
        raise TimeError(_out_of_range(text))
    value = local.astimezone(UTC)
    if not EARLIEST <= value <= LATEST:
        raise TimeError(_out_of_range(text))
    return value


def parse_epoch(text: object, *, date_ok: bool = False) -> float:
    """:func:`parse_time` as epoch seconds."""
    return parse_time(text, date_ok=date_ok).timestamp()


def check_epoch(epoch: float) -> float:
    """Epoch seconds inside [EARLIEST, LATEST] (a value read from a tag or a file), else
    :class:`TimeError`."""
    import math

    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool) or math.isnan(epoch) \
            or not EARLIEST.timestamp() <= epoch <= LATEST.timestamp():
        kind = TooLate if isinstance(epoch, (int, float)) and not isinstance(epoch, bool) \
            and epoch > LATEST.timestamp() else TimeError
        raise kind(f"{epoch!r} epoch seconds is outside {format_utc(EARLIEST)} .. "
                        f"{format_utc(LATEST)}")
    return float(epoch)


def _out_of_range(text: str) -> str:
    return (f"{text!r} is outside the times gpulease accepts ({format_utc(EARLIEST)} to "
            f"{format_utc(LATEST)}, in UTC)")


def _why_not(text: str, date_ok: bool) -> str:
    s = text.strip()
    if s != text:
        hint = "it has spaces around it"
    elif not s:
        hint = "it is empty"
    elif re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?", s):
        hint = "it has no zone: add Z (UTC) or an offset such as +01:00"
    elif re.search(r"\d{4}-?W\d{2}", s, re.IGNORECASE):
        hint = "an ISO 8601 week date"
    elif re.fullmatch(r"\d{8}[Tt]?\d{0,6}.*", s):
        hint = "the ISO 8601 basic format, without dashes and colons"
    elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
        hint = "a bare date: add the time and zone"
    else:
        hint = "date T time and a zone, nothing else"
    also = " (or a bare date, YYYY-MM-DD = midnight UTC)" if date_ok else ""
    return f'{text!r} is not an RFC 3339 time ({hint}); write one such as "{EXAMPLE}"{also}'


_override: Optional[float] = None


def set_now(epoch: Optional[float]) -> None:
    """Judge time as of ``epoch`` seconds (None = the real now again)."""
    global _override
    if epoch is not None:
        check_epoch(epoch)
    _override = epoch


def now() -> dt.datetime:
    """The moment, aware UTC."""
    if _override is not None:
        return dt.datetime.fromtimestamp(_override, dt.timezone.utc)
    return dt.datetime.now(dt.timezone.utc)


def format_utc(t: Union[dt.datetime, float, None], *, minutes: bool = False) -> Optional[str]:
    """``2026-12-04T11:30:00Z`` (``2026-12-04T11:30Z`` with ``minutes``): the one way gpulease
    writes a UTC time. ``t``: a datetime (naive ones are taken as UTC) or epoch seconds (None
    stays None); fractions of the last unit are cut, not rounded."""
    if t is None:
        return None
    if not isinstance(t, dt.datetime):
        t = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    elif t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ" if minutes
                                                  else "%Y-%m-%dT%H:%M:%SZ")
