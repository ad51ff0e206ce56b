"""Declared work windows (issue 21 item 3): cron schedules, their tag/label encoding, and holds.

A cluster may declare when its work is due — ``schedule: [{cron: "0 2 * * *", minutes: 120}]``
in the stack config: a window starts at every time the five-field cron expression (UTC) matches
and lasts ``minutes``. The reaper does not act on a cluster from ``lead`` minutes before a
window's start until its end (the work is due, or running), and a new cluster gets a first-job
grace before it can be marked. The same rules hold at plan time (``explain``) and at run time
(the reaper reads the windows back from the cluster's tags / labels).

Cron: ``minute hour day-of-month month day-of-week``, each ``*``, a number, a range ``a-b``, a
step ``*/n`` or ``a-b/n``, or a comma list of those; day of week 0-7 (0 and 7 are Sunday);
month and day names (``jan``, ``mon``) are accepted in the config. As in cron, when both
day-of-month and day-of-week are restricted, a day matches if either does.

Encoding, valid as an AWS tag value and a GCP label value (``[a-z0-9_-]``, at most 63 chars):
the five fields and the window length joined by ``_``, with ``*`` written ``x``, ``/`` written
``s`` and ``,`` written ``c``: ``0 2 * * 1-5`` for 120 min is ``0_2_x_x_1-5_120``. Names are
written as numbers. One window per key (``gpulease-schedule-0`` .. ``-3``, tags.SCHEDULE).

Pure: no SDK, pydantic or Pulumi import (the scheduled reapers run it).
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from gpulease.clock import format_utc

#: at most this many windows per cluster (one tag/label key each).
MAX_WINDOWS = 4
#: longest window (one week) and longest lead / first-job grace (one day).
MAX_WINDOW_MINUTES = 7 * 24 * 60
MAX_LEAD_MINUTES = 24 * 60
MAX_FIRST_JOB_GRACE_MINUTES = 7 * 24 * 60
#: defaults: never act within an hour of declared work; a new cluster waits two hours for its
#: first job before it can be marked (a cluster brought up at 00:00 for a 02:00 job).
DEFAULT_LEAD_MINUTES = 60
DEFAULT_FIRST_JOB_GRACE_MINUTES = 120
_LABEL_MAX = 63

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 7))
_NAMES = {
    3: {n: i + 1 for i, n in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug",
                                        "sep", "oct", "nov", "dec"))},
    4: {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))},
}
_ATOM = re.compile(r"^(\*|[0-9]+|[a-z]{3})(?:-([0-9]+|[a-z]{3}))?(?:/([0-9]+))?$")


#: The day rule, shipped verbatim to the node autostop (templates/bootstrap/autostop.sh.j2), so
#: the reaper and the node agree on when declared work is due. ``weekday``: Sunday = 0. (No
#: single quote in it: it is embedded in a single-quoted shell string.)
MATCH_SOURCE = """
def cron_match(fields, dom_any, dow_any, minute, hour, day, month, weekday):
    if minute not in fields[0] or hour not in fields[1] or month not in fields[3]:
        return False
    day_ok = day in fields[2]
    week_ok = weekday in fields[4] or (weekday == 0 and 7 in fields[4])
    if dom_any and dow_any:
        return True
    if dom_any:
        return week_ok
    if dow_any:
        return day_ok
    return day_ok or week_ok
"""
_MATCH: dict = {}
exec(MATCH_SOURCE, _MATCH)  # noqa: S102 - our own constant, defined just above
cron_match = _MATCH["cron_match"]


class CronError(ValueError):
    """An expression that is not a five-field cron schedule (the message says which part)."""


@dataclass(frozen=True)
class Cron:
    """A parsed five-field cron expression (UTC)."""

    fields: tuple[frozenset, ...]
    #: field texts with names written as numbers (what is encoded).
    texts: tuple[str, ...]
    dom_any: bool
    dow_any: bool

    def matches(self, t: _dt.datetime) -> bool:
        # (both day fields restricted: either matches, as in cron; Monday = 1 ... Sunday = 0)
        return cron_match(self.fields, self.dom_any, self.dow_any, t.minute, t.hour, t.day,
                          t.month, (t.weekday() + 1) % 7)

    @property
    def text(self) -> str:
        return " ".join(self.texts)


def _value(raw: str, index: int) -> int:
    if raw.isdigit():
        return int(raw)
    names = _NAMES.get(index, {})
    if raw in names:
        return names[raw]
    raise CronError(f"{raw!r} is not a {_FIELDS[index][0]}")


def parse_cron(expr: str) -> Cron:
    """Parse ``expr`` (five fields, UTC) or raise :class:`CronError` naming the bad part."""
    text = str(expr).strip().lower()
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{expr!r} has {len(parts)} field(s); a schedule is five: minute hour "
                        "day-of-month month day-of-week (UTC), e.g. \"0 2 * * *\"")
    fields, texts = [], []
    for index, part in enumerate(parts):
        name, lo, hi = _FIELDS[index]
        values: set = set()
        canon = []
        for item in part.split(","):
            m = _ATOM.match(item)
            if not m:
                raise CronError(f"{item!r} in the {name} field of {expr!r} is not a number, a "
                                "range a-b, a step */n or a-b/n, or *")
            first, last, step = m.group(1), m.group(2), m.group(3)
            if first == "*":
                if last is not None:
                    raise CronError(f"{item!r} in the {name} field of {expr!r}: '*' takes no "
                                    "range")
                a, b = lo, hi
            else:
                a = _value(first, index)
                b = _value(last, index) if last is not None else (hi if step else a)
            n = int(step) if step is not None else 1
            if not (lo <= a <= hi and lo <= b <= hi):
                raise CronError(f"{item!r} in the {name} field of {expr!r} is outside "
                                f"{lo}-{hi}")
            if a > b:
                raise CronError(f"{item!r} in the {name} field of {expr!r}: the range runs "
                                "backwards")
            if n < 1:
                raise CronError(f"{item!r} in the {name} field of {expr!r}: a step must be at "
                                "least 1")
            values.update(range(a, b + 1, n))
            if first == "*":
                canon.append("*" + (f"/{n}" if step is not None else ""))
            elif last is None and step is None:
                canon.append(str(a))
            else:
                canon.append(f"{a}-{b}" + (f"/{n}" if step is not None else ""))
        fields.append(frozenset(values))
        texts.append(",".join(canon))
    # (as Vixie cron: a field starting with "*" is unrestricted for the day-of-month /
    # day-of-week "either" rule)
    cron = Cron(fields=tuple(fields), texts=tuple(texts), dom_any=parts[2].startswith("*"),
                dow_any=parts[4].startswith("*"))
    if cron.dow_any and not cron.dom_any and not any(
            day <= _DAYS_IN_MONTH[month] for month in cron.fields[3] for day in cron.fields[2]):
        # only the day of month decides (an unrestricted day of week adds no day), and no month
        # of the expression has such a day: it never falls due ("0 0 30 2 *", "0 0 31 4 *")
        months = ", ".join(_MONTH_NAMES[m - 1] for m in sorted(cron.fields[3]))
        raise CronError(f"{expr!r} never falls due: no day {_ranges(cron.fields[2])} in "
                        f"{months} (at most {max(_DAYS_IN_MONTH[m] for m in cron.fields[3])} "
                        "days); fix the day of month or the month")
    return cron


#: days a month can have (February: 29, in a leap year: "0 0 29 2 *" falls due every 4 years)
_DAYS_IN_MONTH = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31,
                  11: 30, 12: 31}
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                "Dec")


def _ranges(values: Iterable[int]) -> str:
    v = sorted(values)
    return str(v[0]) if len(v) == 1 else f"{v[0]}-{v[-1]}" if v == list(
        range(v[0], v[-1] + 1)) else ",".join(map(str, v))


@dataclass(frozen=True)
class Window:
    """A declared window: starts whenever ``cron`` matches, lasts ``minutes``."""

    cron: Cron
    minutes: int

    def encode(self) -> str:
        """The tag/label value (see the module docstring)."""
        body = "_".join(t.replace("*", "x").replace("/", "s").replace(",", "c")
                        for t in self.cron.texts)
        return f"{body}_{self.minutes}"

    def describe(self) -> str:
        return f'"{self.cron.text}" (UTC) for {self.minutes} min'

    def starts_between(self, lo: float, hi: float) -> Iterable[float]:
        """Start times (epoch s) in ``[lo, hi]``, in order (day by day, then the hours and
        minutes the expression allows)."""
        minutes = sorted(self.cron.fields[0])
        hours = sorted(self.cron.fields[1])
        day = _dt.datetime.fromtimestamp(lo, _dt.timezone.utc).replace(hour=0, minute=0,
                                                                        second=0, microsecond=0)
        last = _dt.datetime.fromtimestamp(hi, _dt.timezone.utc)
        while day <= last:
            if self.cron.matches(day.replace(hour=hours[0], minute=minutes[0])):
                for h in hours:
                    for m in minutes:
                        t = day.replace(hour=h, minute=m).timestamp()
                        if lo <= t <= hi:
                            yield t
            day += _dt.timedelta(days=1)


def window(cron: str, minutes: int) -> Window:
    if not (isinstance(minutes, int) and not isinstance(minutes, bool)
            and 1 <= minutes <= MAX_WINDOW_MINUTES):
        raise CronError(f"a window lasts 1 to {MAX_WINDOW_MINUTES} minutes (got {minutes!r})")
    w = Window(parse_cron(cron), minutes)
    if len(w.encode()) > _LABEL_MAX:
        raise CronError(f"{cron!r} is too long to carry as a tag/label value ({len(w.encode())} "
                        f"> {_LABEL_MAX} characters encoded): split it into two windows")
    return w


_ENCODED = re.compile(r"^([0-9a-z-]+)_([0-9a-z-]+)_([0-9a-z-]+)_([0-9a-z-]+)_([0-9a-z-]+)"
                      r"_([0-9]{1,6})$")


def decode(value: str) -> Window:
    """A window from its tag/label value; :class:`CronError` when it is not one (untrusted)."""
    m = _ENCODED.match(str(value).strip())
    if not m:
        raise CronError(f"{str(value)[:40]!r} is not an encoded schedule window "
                        "(minute_hour_dom_month_dow_minutes)")
    fields = [g.replace("x", "*").replace("s", "/").replace("c", ",") for g in m.groups()[:5]]
    return window(" ".join(fields), int(m.group(6)))


@dataclass(frozen=True)
class Hold:
    """Why the reaper must not act now, and until when (epoch s)."""

    kind: str          # "schedule" | "first-job-grace" | "billed-until"
    until: float
    detail: str

    def as_json(self) -> dict:
        return {"kind": self.kind, "until": format_utc(self.until, minutes=True),
                "detail": self.detail}


def schedule_hold(windows: Sequence[Window], *, now: float, lead_minutes: int) -> Optional[Hold]:
    """The hold in force at ``now``: inside ``[start - lead, start + minutes)`` of a window
    occurrence. When several overlap, the one ending last."""
    best: Optional[Hold] = None
    lead = lead_minutes * 60
    for w in windows:
        for start in w.starts_between(now - w.minutes * 60 + 1, now + lead):
            end = start + w.minutes * 60
            if start - lead <= now < end and (best is None or end > best.until):
                best = Hold("schedule", end, f"work due {format_utc(start, minutes=True)} to "
                            f"{format_utc(end, minutes=True)} by the declared schedule "
                            f"{w.describe()}, lead {lead_minutes} min")
    return best


def next_holds(windows: Sequence[Window], *, now: float, lead_minutes: int,
               horizon_s: float = 7 * 86400, limit: int = 3) -> list[tuple[float, float, Window]]:
    """The next hold periods ``(from, until, window)`` within ``horizon_s`` (for ``explain``)."""
    out = []
    lead = lead_minutes * 60
    for w in windows:
        for start in w.starts_between(now, now + horizon_s):
            out.append((start - lead, start + w.minutes * 60, w))
            if len(out) > 8 * limit:
                break
    return sorted(out, key=lambda x: x[0])[:limit]


def tag_values(windows: Sequence[tuple[str, int]], *, lead_minutes: int,
               first_job_grace_minutes: int) -> dict[str, str]:
    """The tags/labels a cluster's compute carries for these settings (values valid on both
    clouds): one key per window, the lead when there are windows, the first-job grace when it
    is not the default (the reaper assumes the defaults for a key that is absent)."""
    from gpulease import tags

    out: dict[str, str] = {}
    for i, (cron, minutes) in enumerate(windows):
        out[tags.schedule_key(i)] = window(cron, minutes).encode()
    if windows:
        out[tags.SCHEDULE_LEAD] = str(int(lead_minutes))
    if first_job_grace_minutes != DEFAULT_FIRST_JOB_GRACE_MINUTES:
        out[tags.FIRST_JOB_GRACE] = str(int(first_job_grace_minutes))
    return out


def node_data(windows: Sequence[tuple[str, int]]) -> list[dict]:
    """The declared windows as the node autostop reads them (JSON-ready): field value lists,
    the two "unrestricted day field" flags, the length and the text."""
    out = []
    for cron, minutes in windows:
        c = parse_cron(cron)
        out.append({"fields": [sorted(f) for f in c.fields], "dom_any": c.dom_any,
                    "dow_any": c.dow_any, "minutes": int(minutes), "text": c.text})
    return out


def windows_from_tags(values: Mapping[str, str], keys: Sequence[str]) -> tuple[list, list]:
    """([Window], [problem]) from the tag/label values under ``keys`` (untrusted)."""
    found, problems = [], []
    for k in keys:
        if k in values:
            try:
                found.append(decode(values[k]))
            except CronError as exc:
                problems.append(f"{k}: {exc}")
    return found, problems
