"""AWS: what the account already paid for, read with boto3 into inventory holdings.

Per region of the stack (``gpulease:clouds.aws.regions``):

- ``ec2:DescribeReservedInstances`` (not paged: the API answers every RI at once), asked for the
  states ``active``, ``payment-pending``, ``queued`` and ``retired``; a retired RI is kept when
  it ended less than :data:`RECENT_DAYS` ago (what just lapsed is worth a line), older ones are
  dropped. A holding per RI: type, zone (zonal scope), count, start/end, the hourly recurring
  charge and usage price times the count (``usd_per_hour``), the fixed price times the count
  (``upfront_usd``), offering class and type;
- ``ec2:DescribeCapacityReservations`` (paged with ``MaxResults``/``NextToken``): On-Demand
  Capacity Reservations (kind ``ec2-capacity-reservation``) and Capacity Blocks
  (``ReservationType: capacity-block``, kind ``ec2-capacity-block``), with
  ``TotalInstanceCount`` and ``used_instances`` = total - ``AvailableInstanceCount``; the states
  that never held capacity (cancelled, failed, payment-failed, unsupported) are dropped, an
  expired one is kept for :data:`RECENT_DAYS` like a retired RI.

Once per account (the Savings Plans API is global): ``savingsplans:DescribeSavingsPlans``
(paged by hand: botocore has no paginator for it) for the same states, keeping the regionless
plans (Compute, SageMaker) and the EC2 Instance plans of the stack's regions; then, for each plan
not ended, ``savingsplans:DescribeSavingsPlanRates`` filtered to EC2, Linux/UNIX, shared tenancy,
the stack's regions and the GPU instance types the catalog offers: the plan's rate per
instance-hour, ``Holding.rates["region/type"]``. ``sts:GetCallerIdentity`` names the account.

Every call goes through :func:`_call`: throttling and 5xx answers are retried with the one retry
policy (``gpulease.retry``; botocore's own retries are off), and every SDK error becomes a
:class:`gpulease.errors.CloudError` with the HTTP ``status`` and, for a 403, the IAM action that
was refused.
"""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional

from gpulease.clock import format_utc
from gpulease.errors import CloudError
from gpulease.inventory.model import Holding, KINDS, Source
from gpulease.retry import Backoff

CLOUD = "aws"
#: kinds this reader writes (``Cloud.inventory_kinds``).
RI, SP, ODCR, BLOCK = ("ec2-reserved-instances", "savings-plan", "ec2-capacity-reservation",
                       "ec2-capacity-block")
#: an item that ended (retired RI or Savings Plan, expired reservation) less than this many days
#: ago is kept in the inventory, marked by its state; older ones are left out.
RECENT_DAYS = 90
#: DescribeReservedInstances / DescribeSavingsPlans states asked for (botocore's enums
#: ReservedInstanceState, SavingsPlanState): what holds, will hold, or just held capacity.
RI_STATES = ("active", "payment-pending", "queued", "retired")
SP_STATES = ("active", "payment-pending", "queued", "retired")
#: Capacity reservation states that never held capacity (CapacityReservationState enum).
CR_DROPPED = frozenset({"cancelled", "failed", "payment-failed", "unsupported"})
#: the largest page each listing allows (botocore's models: DescribeCapacityReservations
#: MaxResults 1-1000; Savings Plans MaxResults 1-1000). Tests shrink them.
PAGE_SIZE = {"DescribeCapacityReservations": 1000, "DescribeSavingsPlans": 1000,
             "DescribeSavingsPlanRates": 1000}
#: the Savings Plan field holding its commitment in $/hour (SavingsPlan.commitment, an Amount
#: string; the API's name, not a purchase model).
SP_HOURLY = "commitment"
#: seconds in a month of a 365-day year (a 1-year term is 31,536,000 s = 12 months).
MONTH_S = 365 * 86400 / 12
#: the IAM action behind each operation (named when AWS refuses it).
IAM_ACTIONS = {"DescribeReservedInstances": "ec2:DescribeReservedInstances",
               "DescribeCapacityReservations": "ec2:DescribeCapacityReservations",
               "DescribeSavingsPlans": "savingsplans:DescribeSavingsPlans",
               "DescribeSavingsPlanRates": "savingsplans:DescribeSavingsPlanRates",
               "GetCallerIdentity": "sts:GetCallerIdentity"}
#: error codes that mean "slow down" or "try again" (EC2 RequestLimitExceeded, the JSON
#: services' ThrottlingException, ...).
RETRY_CODES = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded",
                         "TooManyRequestsException", "RequestThrottled", "ServiceUnavailable",
                         "ServiceUnavailableException", "InternalError", "InternalFailure",
                         "InternalServerException", "Unavailable"})


@dataclass
class Clients:
    """boto3 clients of one run: EC2 per region (made on demand), Savings Plans, STS."""

    ec2_factory: Callable[[str], Any]
    savingsplans: Any
    sts: Any
    backoff: Backoff = field(default_factory=Backoff)
    _ec2: dict = field(default_factory=dict)

    def ec2(self, region: str) -> Any:
        if region not in self._ec2:
            self._ec2[region] = self.ec2_factory(region)
        return self._ec2[region]


def make_clients(session: Any = None, *, sleep: Callable[[float], None] = time.sleep) -> Clients:
    """Real boto3 clients (AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> are honoured)."""
    import boto3
    from botocore.config import Config

    session = session or boto3.session.Session()
    cfg = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10,
                 read_timeout=30)
    # Savings Plans has one global endpoint (savingsplans.amazonaws.com, signed for us-east-1)
    return Clients(ec2_factory=lambda r: session.client("ec2", region_name=r, config=cfg),
                   savingsplans=session.client("savingsplans", region_name="us-east-1",
                                               config=cfg),
                   sts=session.client("sts", region_name="us-east-1", config=cfg),
                   backoff=Backoff(sleep=sleep))


# ---- the one boundary to botocore ----------------------------------------------------------
def _status(exc: BaseException) -> Optional[int]:
    resp = getattr(exc, "response", None) or {}
    status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return int(status) if status else None


def _retryable(exc: BaseException) -> bool:
    from botocore.exceptions import (ClientError, ConnectionClosedError, ConnectTimeoutError,
                                     EndpointConnectionError, ReadTimeoutError)
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return code in RETRY_CODES or (_status(exc) or 0) >= 500 or _status(exc) == 429
    if isinstance(exc, ResponseParserError):
        return True   # an HTML error page (a gateway): like a 5xx
    return isinstance(exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError,
                            ConnectTimeoutError))


def _call(clients: Clients, op: str, where: str, fn: Callable[[], Any]) -> Any:
    """Run one request; retry what is transient; every SDK error -> CloudError(status=...)."""
    from botocore.exceptions import (BotoCoreError, ClientError, NoCredentialsError,
                                     PartialCredentialsError)
    from botocore.parsers import ResponseParserError

    backoff = clients.backoff
    try:
        return backoff.call(fn, retryable=_retryable)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code, msg = err.get("Code", "?"), " ".join(str(err.get("Message", "")).split())[:300]
        status = _status(exc)
        text = f"{where}: {code}: {msg}"
        if status == 403 or code in ("AccessDenied", "AccessDeniedException",
                                     "UnauthorizedOperation"):
            text += (f" (the credentials in use lack {IAM_ACTIONS.get(op, op)}: grant it, "
                     "see docs/inventory.md \"Permissions\")")
        elif _retryable(exc):
            text += f" (still failing after {backoff.attempts} attempts)"
        raise CloudError(CLOUD, op, text, retryable=_retryable(exc), status=status) from None
    except (NoCredentialsError, PartialCredentialsError):
        raise   # the CLI says what to set (gpulease.credentials), exit 2
    except ResponseParserError as exc:
        first = str(exc).split("\n", 1)
        raise CloudError(CLOUD, op, f"{where}: unparseable answer after {backoff.attempts} "
                         f"attempts (an HTML page: a proxy, or an emulator without {op}?)"
                         + (f": {first[1].strip()[:80]}" if len(first) > 1 else ""),
                         retryable=True) from None
    except BotoCoreError as exc:
        raise CloudError(CLOUD, op, f"{where}: {exc}", retryable=_retryable(exc)) from None


def _pages(clients: Clients, op: str, where: str, call: Callable[..., dict], *, items: str,
           token_in: str, token_out: str, size_key: str, params: dict) -> Iterator[dict]:
    """Every item of a paged listing, one request per page (each retried alone); a token
    answered twice is refused (the listing would never end)."""
    token: Optional[str] = None
    seen: set = set()
    while True:
        kw = dict(params, **{size_key: PAGE_SIZE[op]})
        if token:
            kw[token_in] = token
        page = _call(clients, op, where, lambda kw=kw: call(**kw))
        got = page.get(items)
        if not isinstance(got, list):
            raise CloudError(CLOUD, op, f"{where}: the answer has no {items} list (truncated, "
                             "or not from AWS)")
        yield from got
        token = page.get(token_out) or None
        if not token:
            return
        if token in seen:
            raise CloudError(CLOUD, op, f"{where}: the same {token_out} was answered twice (the "
                             "listing would never end)")
        seen.add(token)


# ---- conversions -----------------------------------------------------------------------------
def _time(value: Any) -> Optional[str]:
    """An API time (a datetime from botocore, or an RFC 3339 string) as the inventory's UTC."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return format_utc(value)


def _usd(value: Any, where: str, op: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise CloudError(CLOUD, op, f"{where}: {value!r} is not an amount") from None
    if not 0 <= out < 1e12:
        raise CloudError(CLOUD, op, f"{where}: {value!r} is not a plausible amount")
    return out


def _recent(end: Optional[str], now: dt.datetime) -> bool:
    """An ended item is kept while it ended less than RECENT_DAYS ago."""
    if end is None:
        return True
    ended = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
    return ended > now - dt.timedelta(days=RECENT_DAYS)


def _months(seconds: Any) -> Optional[int]:
    return int(round(float(seconds) / MONTH_S)) if seconds else None


def _holding(**kw: Any) -> Holding:
    kind = kw["kind"]
    return Holding(cloud=CLOUD, model=KINDS[kind][1], **kw)


def _family(instance_type: Optional[str]) -> Optional[str]:
    return instance_type.split(".", 1)[0] if instance_type else None


def reserved_instances(clients: Clients, region: str, account: str,
                       now: dt.datetime) -> list[Holding]:
    op, where = "DescribeReservedInstances", f"{region} ec2.DescribeReservedInstances"
    ec2 = clients.ec2(region)
    answer = _call(clients, op, where, lambda: ec2.describe_reserved_instances(
        Filters=[{"Name": "state", "Values": list(RI_STATES)}]))
    out = []
    for ri in answer.get("ReservedInstances") or []:
        rid = ri.get("ReservedInstancesId") or "?"
        at = f"{where} {rid}"
        try:
            count = int(ri["InstanceCount"])
            itype = ri["InstanceType"]
        except (KeyError, TypeError, ValueError):
            raise CloudError(CLOUD, op, f"{at}: no InstanceType/InstanceCount in the answer"
                             ) from None
        state = str(ri.get("State") or "").lower()
        end = _time(ri.get("End"))
        if state == "retired" and not _recent(end, now):
            continue
        hourly = sum(_usd(c.get("Amount"), at, op) for c in ri.get("RecurringCharges") or []
                     if c.get("Frequency") == "Hourly")
        hourly += _usd(ri.get("UsagePrice") or 0, at, op)
        currency = ri.get("CurrencyCode") or "USD"
        usd = currency == "USD"
        zonal = ri.get("Scope") == "Availability Zone"
        detail = {k: str(ri[src]) for k, src in (
            ("offering_class", "OfferingClass"), ("offering_type", "OfferingType"),
            ("scope", "Scope"), ("product_description", "ProductDescription"),
            ("tenancy", "InstanceTenancy"), ("currency", "CurrencyCode")) if ri.get(src)}
        out.append(_holding(
            id=rid, kind=RI, scope=account, region=region,
            zone=ri.get("AvailabilityZone") if zonal else None, instance_type=itype,
            instance_family=_family(itype), instances=count, start=_time(ri.get("Start")),
            end=end, state=state, usd_per_hour=round(hourly * count, 6) if usd else None,
            upfront_usd=round(_usd(ri.get("FixedPrice") or 0, at, op) * count, 2) if usd
            else None, term_months=_months(ri.get("Duration")), detail=detail))
    return out


def capacity_reservations(clients: Clients, region: str, account: str,
                          now: dt.datetime) -> list[Holding]:
    op, where = "DescribeCapacityReservations", f"{region} ec2.DescribeCapacityReservations"
    ec2 = clients.ec2(region)
    out = []
    for cr in _pages(clients, op, where, ec2.describe_capacity_reservations,
                     items="CapacityReservations", token_in="NextToken", token_out="NextToken",
                     size_key="MaxResults", params={}):
        cid = cr.get("CapacityReservationId") or "?"
        at = f"{where} {cid}"
        state = str(cr.get("State") or "").lower()
        if state in CR_DROPPED:
            continue
        try:
            total = int(cr["TotalInstanceCount"])
            available = int(cr.get("AvailableInstanceCount") or 0)
            itype = cr["InstanceType"]
        except (KeyError, TypeError, ValueError):
            raise CloudError(CLOUD, op, f"{at}: no InstanceType/TotalInstanceCount in the "
                             "answer") from None
        end = None if cr.get("EndDateType") == "unlimited" else _time(cr.get("EndDate"))
        if state == "expired" and not _recent(end, now):
            continue
        block = cr.get("ReservationType") == "capacity-block"
        detail = {k: str(cr[src]) for k, src in (
            ("match_criteria", "InstanceMatchCriteria"), ("platform", "InstancePlatform"),
            ("tenancy", "Tenancy"), ("end_date_type", "EndDateType"),
            ("capacity_block_id", "CapacityBlockId"), ("zone_id", "AvailabilityZoneId"))
            if cr.get(src)}
        out.append(_holding(
            id=cid, kind=BLOCK if block else ODCR, scope=cr.get("OwnerId") or account,
            region=region, zone=cr.get("AvailabilityZone"), instance_type=itype,
            instance_family=_family(itype), instances=total,
            used_instances=max(0, total - available), start=_time(cr.get("StartDate")),
            end=end, state=state, detail=detail))
    return out


def savings_plans(clients: Clients, regions: Iterable[str], account: str, now: dt.datetime,
                  instance_types: Iterable[str] = ()) -> list[Holding]:
    op, where = "DescribeSavingsPlans", "savingsplans.DescribeSavingsPlans"
    sp = clients.savingsplans
    regions = list(regions)
    out = []
    for plan in _pages(clients, op, where, sp.describe_savings_plans, items="savingsPlans",
                       token_in="nextToken", token_out="nextToken", size_key="maxResults",
                       params={"states": list(SP_STATES)}):
        pid = plan.get("savingsPlanId") or "?"
        at = f"{where} {pid}"
        region = plan.get("region") or ""
        if region and region not in regions:
            continue          # an EC2 Instance Savings Plan of another region
        state = str(plan.get("state") or "").lower()
        end = _time(plan.get("end"))
        if state == "retired" and not _recent(end, now):
            continue
        usd = (plan.get("currency") or "USD") == "USD"
        hourly = plan.get(SP_HOURLY)
        if hourly in (None, ""):
            raise CloudError(CLOUD, op, f"{at}: no {SP_HOURLY} in the answer")
        detail = {k: str(plan[src]) for k, src in (
            ("savings_plan_type", "savingsPlanType"), ("payment_option", "paymentOption"),
            ("offering_id", "offeringId"), ("currency", "currency"))
            if plan.get(src)}
        if plan.get("productTypes"):
            detail["product_types"] = ",".join(plan["productTypes"])
        rates: dict = {}
        if instance_types and state in ("active", "queued", "payment-pending") and usd:
            rates = plan_rates(clients, pid, regions if not region else [region],
                               instance_types)
        out.append(_holding(
            id=pid, kind=SP, scope=account, region=region,
            instance_family=plan.get("ec2InstanceFamily") or None, start=_time(plan.get("start")),
            end=end, state=state,
            usd_per_hour=_usd(hourly, at, op) if usd else None,
            upfront_usd=_usd(plan.get("upfrontPaymentAmount") or 0, at, op) if usd else None,
            term_months=_months(plan.get("termDurationInSeconds")), rates=rates,
            detail=detail))
    return out


def plan_rates(clients: Clients, plan_id: str, regions: list[str],
               instance_types: Iterable[str]) -> dict[str, float]:
    """{"region/type": $ per instance-hour} of one Savings Plan for the types asked."""
    op, where = "DescribeSavingsPlanRates", f"savingsplans.DescribeSavingsPlanRates {plan_id}"
    filters = [{"name": "productType", "values": ["EC2"]},
               {"name": "productDescription", "values": ["Linux/UNIX"]},
               {"name": "tenancy", "values": ["shared"]},
               {"name": "region", "values": list(regions)},
               {"name": "instanceType", "values": sorted(set(instance_types))}]
    out: dict = {}
    for r in _pages(clients, op, where, clients.savingsplans.describe_savings_plan_rates,
                    items="searchResults", token_in="nextToken", token_out="nextToken",
                    size_key="maxResults", params={"savingsPlanId": plan_id,
                                                   "filters": filters}):
        if r.get("unit") != "Hrs" or (r.get("currency") or "USD") != "USD":
            continue
        props = {p.get("name"): p.get("value") for p in r.get("properties") or []}
        if props.get("region") and props.get("instanceType"):
            out[f"{props['region']}/{props['instanceType']}"] = _usd(r.get("rate"), where, op)
    return dict(sorted(out.items()))


def account_id(clients: Clients) -> str:
    answer = _call(clients, "GetCallerIdentity", "sts.GetCallerIdentity",
                   clients.sts.get_caller_identity)
    return str(answer.get("Account") or "")


#: what the inventory reads here (credentials messages).
NEEDS = ("inventory reads Reserved Instances, Savings Plans and their rates, capacity "
         "reservations and Capacity Blocks")
#: what this reader calls (``Source.reads``).
READS = ("sts:GetCallerIdentity", "ec2:DescribeReservedInstances",
         "ec2:DescribeCapacityReservations", "savingsplans:DescribeSavingsPlans",
         "savingsplans:DescribeSavingsPlanRates")


def collect(scope: str, regions: Iterable[str], *, progress: Callable[[str], None] = lambda m: None,
            instance_types: Iterable[str] = (), clients: Optional[Clients] = None,
            now: Optional[dt.datetime] = None) -> tuple[list[Holding], Source]:
    """Every holding of the account in ``regions`` (``scope``: the account id, else asked of
    STS), and the source record. Raises CloudError when any call fails (nothing partial)."""
    clients = clients or make_clients()
    now = now or dt.datetime.now(dt.timezone.utc)
    regions = list(dict.fromkeys(regions))
    instance_types = tuple(instance_types)
    progress("AWS: which account (sts:GetCallerIdentity)")
    account = scope or account_id(clients)
    holdings: list[Holding] = []
    for region in regions:
        progress(f"AWS {region}: Reserved Instances")
        holdings += reserved_instances(clients, region, account, now)
        progress(f"AWS {region}: capacity reservations and Capacity Blocks")
        holdings += capacity_reservations(clients, region, account, now)
    progress("AWS: Savings Plans and their rates")
    holdings += savings_plans(clients, regions, account, now, instance_types)
    source = Source(cloud=CLOUD, scope=account, regions=regions, read_at=format_utc(now),
                    reads=list(READS))
    return holdings, source
