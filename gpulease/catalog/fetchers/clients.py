"""The one place where pricing-API clients are created, and where their errors become CloudError.

Fetchers never build a boto3 / google-cloud client themselves: they receive an ``AwsClients`` or
``GcpClients`` and call the APIs through ``aws_call`` / ``gcp_call``, which retry throttling with
the one retry policy (``gpulease.retry``; botocore's own retries are off, so a call is retried once
over) and translate every SDK error into ``gpulease.errors.CloudError`` (missing credentials
included), so the refresh can report "this region / this API failed" and go on.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from gpulease.credentials import FIX
from gpulease.errors import CloudError
from gpulease.retry import Backoff

#: The Price List Query API is served from a few regions only; us-east-1 is the documented one
#: for the "api.pricing" endpoint (AWS Price List Query API, "Endpoints").
AWS_PRICING_REGION = "us-east-1"
#: Compute Engine's service id in the Cloud Billing Catalog (https://cloud.google.com/skus).
GCE_SERVICE = "services/6F81-5844-456A"

#: Error codes that mean "slow down" (Pricing API: ThrottlingException; EC2: RequestLimitExceeded).
AWS_THROTTLE_CODES = frozenset({"ThrottlingException", "Throttling", "RequestLimitExceeded",
                                "TooManyRequestsException", "RequestThrottled"})


@dataclass
class AwsClients:
    """boto3 clients for the refresh: one Pricing client, EC2 clients made per region on demand."""

    pricing: Any
    ec2_factory: Callable[[str], Any]
    sleep: Callable[[float], None] = time.sleep
    _ec2: dict = field(default_factory=dict)

    def ec2(self, region: str) -> Any:
        if region not in self._ec2:
            self._ec2[region] = self.ec2_factory(region)
        return self._ec2[region]


@dataclass
class GcpClients:
    """google-cloud clients: the Billing Catalog (prices) and, with a project, Compute (specs)."""

    catalog: Any
    machine_types: Any = None
    accelerator_types: Any = None
    project: Optional[str] = None
    sleep: Callable[[float], None] = time.sleep


def make_aws_clients(*, session: Any = None) -> AwsClients:
    """Real boto3 clients. boto3 honours ``AWS_ENDPOINT_URL`` (used to point EC2 at moto)."""
    try:
        import boto3
    except ImportError as exc:  # pragma: no cover - boto3 is a pinned requirement
        raise CloudError("aws", "client", f"boto3 is not installed ({exc})") from None
    from botocore.config import Config

    session = session or boto3.session.Session()
    once = Config(retries={"total_max_attempts": 1, "mode": "standard"})   # gpulease.retry retries
    pricing = session.client("pricing", region_name=AWS_PRICING_REGION, config=once)
    return AwsClients(pricing=pricing, ec2_factory=lambda region: session.client(
        "ec2", region_name=region, config=once))


def make_gcp_clients(*, project: Optional[str] = None,
                     endpoint: Optional[str] = None) -> GcpClients:
    """Real google-cloud clients, or clients of a local endpoint (``http://host:port``).

    ``endpoint`` (or ``GPULEASE_GCP_ENDPOINT``) sends both the Billing Catalog and the Compute
    calls to one HTTP server with anonymous credentials - how the tests reach their fake.
    Without it, Application Default Credentials are used; their absence becomes a CloudError.
    """
    from google.cloud import billing_v1, compute_v1

    endpoint = endpoint or os.environ.get("GPULEASE_GCP_ENDPOINT")
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or None
    if endpoint:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud.billing_v1.services.cloud_catalog.transports import (
            CloudCatalogRestTransport)
        from google.cloud.compute_v1.services.accelerator_types.transports import (
            AcceleratorTypesRestTransport)
        from google.cloud.compute_v1.services.machine_types.transports import (
            MachineTypesRestTransport)

        scheme, _, host = endpoint.partition("://")
        if not host:
            scheme, host = "http", endpoint
        kw = dict(host=host, url_scheme=scheme, credentials=AnonymousCredentials())
        return GcpClients(
            catalog=billing_v1.CloudCatalogClient(transport=CloudCatalogRestTransport(**kw)),
            machine_types=compute_v1.MachineTypesClient(transport=MachineTypesRestTransport(**kw)),
            accelerator_types=compute_v1.AcceleratorTypesClient(
                transport=AcceleratorTypesRestTransport(**kw)),
            project=project)
    from google.auth.exceptions import DefaultCredentialsError

    try:
        catalog = billing_v1.CloudCatalogClient(transport="rest")
        mt = compute_v1.MachineTypesClient() if project else None
        at = compute_v1.AcceleratorTypesClient() if project else None
    except DefaultCredentialsError as exc:
        raise CloudError("gcp", "credentials", "no Google Cloud credentials found "
                         f"({str(exc).splitlines()[0]}); {FIX['gcp']}") from None
    return GcpClients(catalog=catalog, machine_types=mt, accelerator_types=at, project=project)


# ---- calls through the boundary ---------------------------------------------------------------
def aws_call(clients: AwsClients, operation: str, fn: Callable[[], Any]) -> Any:
    """Run one AWS call; retry throttling (the one retry policy, gpulease.retry), translate errors."""
    from botocore.exceptions import (BotoCoreError, ClientError, EndpointConnectionError,
                                     NoCredentialsError, PartialCredentialsError)

    def throttled(exc: BaseException) -> bool:
        return isinstance(exc, ClientError) and \
            exc.response.get("Error", {}).get("Code") in AWS_THROTTLE_CODES

    backoff = Backoff(sleep=clients.sleep)
    try:
        return backoff.call(fn, retryable=throttled)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code, msg = err.get("Code", "?"), err.get("Message", "")
        retryable = code in AWS_THROTTLE_CODES
        raise CloudError("aws", operation, f"{code}: {msg}" + (
            f" (still throttled after {backoff.attempts} attempts)" if retryable else ""),
            retryable=retryable) from None
    except (NoCredentialsError, PartialCredentialsError):
        raise CloudError("aws", operation, f"no AWS credentials found; {FIX['aws']} (the "
                         "Pricing API needs pricing:GetProducts, EC2 needs ec2:Describe*)"
                         ) from None
    except EndpointConnectionError as exc:
        raise CloudError("aws", operation, f"cannot reach the endpoint ({exc})",
                         retryable=True) from None
    except BotoCoreError as exc:
        raise CloudError("aws", operation, str(exc)) from None


def gcp_call(clients: GcpClients, operation: str, fn: Callable[[], Any]) -> Any:
    """Run one GCP call (including iterating its pager); retry 429/503 (gpulease.retry), translate
    errors."""
    from google.api_core import exceptions as gexc
    from google.auth.exceptions import DefaultCredentialsError, RefreshError

    retry_on = (gexc.TooManyRequests, gexc.ServiceUnavailable)
    backoff = Backoff(sleep=clients.sleep)
    try:
        return backoff.call(fn, retryable=lambda exc: isinstance(exc, retry_on))
    except retry_on as exc:
        raise CloudError("gcp", operation, f"{exc.code} {exc.message} (still failing after "
                         f"{backoff.attempts} attempts)", retryable=True) from None
    except gexc.GoogleAPICallError as exc:
        raise CloudError("gcp", operation, f"{exc.code} {exc.message}") from None
    except (DefaultCredentialsError, RefreshError) as exc:
        raise CloudError("gcp", operation, f"no usable Google Cloud credentials ({exc}); "
                         f"{FIX['gcp']}") from None
    except OSError as exc:  # connection refused, DNS, TLS
        raise CloudError("gcp", operation, f"cannot reach the API ({exc})",
                         retryable=True) from None
