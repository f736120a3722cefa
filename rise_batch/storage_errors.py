"""What an error of object storage means for the user: pyarrow's S3 filesystem raises a bare OSError (`When reading
information for key 'k' in bucket 'b': AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, ...`);
`storage_failure` turns it into one line naming the URI and the endpoint the request went to, and says whether it is
transient (the same command succeeds later: exit 75) or a configuration to fix (exit 2). errors.py maps it.

Pure stdlib.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from rise_batch.storage import known_options


class StorageFailure(NamedTuple):
    """Storage that could not be reached or refused the request, as one line: `transient` (a connection refused or
    timed out, a throttle, a 5xx: the same command succeeds later) or not (no such bucket, refused credentials, an
    endpoint that does not resolve: the configuration must change)."""

    transient: bool
    message: str


_AWS_ERROR = re.compile(r"AWS Error (\w+)(?: \(HTTP status (\d+)\))?")
_AWS_WHERE = re.compile(r"(?:key '([^']*)' in )?bucket '([^']*)'")
_AWS_REASON = re.compile(r"operation: (?:curlCode: \d+, )?(.*?)(?:; Details:.*|\s*\(Request ID:.*)?$", re.S)
_TRANSIENT = frozenset(
    {"NETWORK_CONNECTION", "SLOW_DOWN", "THROTTLING", "SERVICE_UNAVAILABLE", "INTERNAL_FAILURE", "REQUEST_TIMEOUT"}
)
_REMEDY = {
    "NO_SUCH_BUCKET": "no such bucket: create it or correct the URI",
    "ACCESS_DENIED": "access denied: check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and the "
    "bucket's permissions",
    "INVALID_ACCESS_KEY_ID": "unknown access key: check AWS_ACCESS_KEY_ID",
    "SIGNATURE_DOES_NOT_MATCH": "the secret does not match the access key: check AWS_SECRET_ACCESS_KEY",
}


def storage_failure(exc: BaseException) -> StorageFailure | None:
    """What `exc` (an OSError of pyarrow's S3 filesystem: `... in bucket 'b': AWS Error CODE during Op operation:
    reason`) says about the storage, naming the URI and the endpoint it was sent to; None for any other error."""
    if not isinstance(exc, OSError):
        return None
    text = str(exc)
    m = _AWS_ERROR.search(text)
    if m is None:
        return None
    code, status = m.group(1), m.group(2) or ""
    where = _AWS_WHERE.search(text)
    bucket = where.group(2) if where else ""
    uri = f"s3://{bucket}/{(where.group(1) or '').rstrip('/')}".rstrip("/") if where else "object storage"
    reason = _AWS_REASON.search(text[m.end() :])
    detail = " ".join((reason.group(1) if reason else code).split()).rstrip(".") or code
    endpoint = s3_endpoint(bucket)
    dns = "curlCode: 6," in text
    if dns:
        return StorageFailure(False, f"{uri}: the storage endpoint {endpoint} does not resolve ({detail}): check it")
    if code in _TRANSIENT or status.startswith("5"):
        return StorageFailure(
            True, f"{uri}: the storage endpoint {endpoint} cannot be reached ({detail}); re-run when it is back"
        )
    what = _REMEDY.get(code, f"{code}: {detail}")
    return StorageFailure(False, f"{uri}: refused by the storage endpoint {endpoint} ({what})")


def s3_endpoint(bucket: str) -> str:
    """The endpoint requests for `bucket` go to: its URI's endpoint_override, else $AWS_ENDPOINT_URL(_S3), else
    AWS's own for the region."""
    from urllib.parse import parse_qs

    _, query = known_options().get(f"s3://{bucket}", ("", ""))
    override = parse_qs(query).get("endpoint_override", [""])[0]
    if override:
        scheme = parse_qs(query).get("scheme", ["https"])[0]
        return override if "://" in override else f"{scheme}://{override}"
    env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if env:
        return env
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "its default region"
    return f"AWS S3 ({region})"
