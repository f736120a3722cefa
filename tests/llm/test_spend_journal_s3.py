"""The spend journal and the kept replies in object storage (a real S3 server, SeaweedFS): a writer killed with
SIGKILL right after a reservation leaves it counted at its worst case, and a request sent again through another
client is answered from the kept reply, billed once by the fake server."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from rise_batch.config import LLMConfig
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.client import LLMClient
from rise_batch.money.journal import Spend
from rise_batch.money.spent import spent_usd
from tests.cli import cli_env

KILLED_WRITER = """
import os, signal, sys
from rise_batch.money.journal import writer_for
writer = writer_for(sys.argv[1])
writer.reserve("0" * 64, 0.25, "trajectory:q1")
os.kill(os.getpid(), signal.SIGKILL)  # no close, no atexit: only what was put before the request counts
"""


def test_on_s3_a_killed_writers_reservation_counts_at_worst_and_a_kept_reply_is_not_bought_again(s3) -> None:
    out = s3.uri("journal-run")
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, out], env=cli_env(), capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert Spend.read(out).unsettled_usd == 0.25

    messages = [{"role": "user", "content": "Give the table of contents of: # Intro\nWords.\n# End\nMore words."}]
    with FakeLLMServer() as server:
        config = LLMConfig(base_url=server.base_url, model="gpt-5.4-mini", max_output_tokens=500)

        async def ask() -> float:
            async with LLMClient(config, out=out) as client:
                return (await client.chat(messages)).cost_usd

        first, again = asyncio.run(ask()), asyncio.run(ask())  # two clients, as a resumed process would be
        bill = server.stats()["bill_usd"]
        assert server.stats()["by_status"] == {"200": 1} and first == again == bill > 0
    journal = Spend.read(out)
    assert (journal.calls, journal.unsettled) == (2, 1) and journal.settled_usd == bill
    assert spent_usd(out) == round(bill + 0.25, 8)
