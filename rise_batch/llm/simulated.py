"""Is a cost real or simulated? Asked of the server, so a dry run is never mistaken for a bill.

Dollars computed from the fake server's token counts look exactly like real ones. The fake server marks every
response with SIMULATED_HEADER; a command that prints costs asks the server once (GET <base_url>/models, free on a
real API too) and labels its costs when the server says so. The server's word, not a guess from the URL: the fake
server can run on any host and a real gateway on localhost. Standard library only, and no import of the rest of
the llm layer, so the commands can call it without loading the client.
"""

from __future__ import annotations

import urllib.error
import urllib.request

SIMULATED_HEADER = "x-rise-batch-simulated"  # value: what produced the numbers ("fake-llm")
LABEL = "(simulated: priced from the fake-llm test server's token counts; nothing was paid)"


def is_simulated(base_url: str | None, timeout_s: float = 5.0) -> bool:
    """True when the server at `base_url` says its replies are simulated. The official API (None) never is; an
    unreachable server counts as real, so a label is never invented (the cost is then printed as before)."""
    if not base_url:
        return False
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout_s) as response:
            return bool(response.headers.get(SIMULATED_HEADER))
    except urllib.error.HTTPError as e:  # a 401 from a real API, or any error answer: read its headers too
        return bool(e.headers.get(SIMULATED_HEADER))
    except (OSError, ValueError):
        return False


def cost_label(base_url: str | None) -> str:
    """ " " + LABEL when the costs of a run against `base_url` are simulated, else ""."""
    return f" {LABEL}" if is_simulated(base_url) else ""
