"""`response_format` on the fake server: checked as OpenAI checks it, obeyed, or refused on request.

A request's `response_format` is read before any responder runs. With the server's `response_format` setting at
"obey" (the default) a json_schema format must have the shape and the strict-mode rules OpenAI enforces (a name of
at most 64 letters, digits, `_` or `-`; under `strict: true` every object lists all its properties as `required`
and sets `additionalProperties: false`), else the request gets the 400 OpenAI would give, so a client that sends
a schema a real provider would refuse fails here first. The responders then answer in the schema's shape (the
structuring reply always is that object; the judge switches to its JSON form). With "refuse" every request
carrying `response_format` gets a 400 worded like OpenAI's for a model without structured outputs, to rehearse a
provider that lacks them.
"""

from __future__ import annotations

import re
from typing import Any

RESPONSE_FORMAT_MODES = ("obey", "refuse")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
REFUSAL = "Invalid parameter: 'response_format' of type '{kind}' is not supported with this model. (fake-llm)"


def response_format_error(body: dict[str, Any], mode: str) -> str | None:
    """Why the request's response_format is refused (the 400's message), or None when it may be answered."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        return "Invalid value for 'response_format.type': expected one of 'text', 'json_object' or 'json_schema'."
    if mode == "refuse" and fmt["type"] != "text":
        return REFUSAL.format(kind=fmt["type"])
    if fmt["type"] != "json_schema":
        return None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not _NAME.fullmatch(spec["name"]):
        return "Invalid 'response_format.json_schema.name': a string of 1-64 letters, digits, '_' or '-' is required."
    schema = spec.get("schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "Invalid schema for response_format: the root must be a JSON schema of type 'object'."
    if spec.get("strict"):
        problem = _strict_problem(schema, ())
        if problem:
            return f"Invalid schema for response_format '{spec['name']}': In context={problem}."
    return None


def _strict_problem(node: Any, path: tuple[str, ...]) -> str | None:
    """The first place the schema breaks a strict-mode rule, in OpenAI's wording, or None."""
    if not isinstance(node, dict):
        return None
    if node.get("type") == "object":
        props = node.get("properties") or {}
        if node.get("additionalProperties") is not False:
            return f"{path}, 'additionalProperties' is required to be supplied and to be false"
        missing = [k for k in props if k not in (node.get("required") or [])]
        if missing:
            return f"{path}, 'required' must list every key in properties; missing {missing[0]!r}"
        for key, sub in props.items():
            problem = _strict_problem(sub, (*path, "properties", key))
            if problem:
                return problem
    if node.get("type") == "array":
        return _strict_problem(node.get("items"), (*path, "items"))
    return None


def format_type(body: dict[str, Any]) -> str | None:
    """The type of the request's response_format ("json_schema", ...), None without one."""
    fmt = body.get("response_format")
    return str(fmt.get("type")) if isinstance(fmt, dict) else None


def wants_json(body: dict[str, Any]) -> bool:
    """Must the reply be a JSON object (a json_schema or json_object response_format)?"""
    return format_type(body) in ("json_schema", "json_object")
