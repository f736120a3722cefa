"""--max-cost only holds over priced replies: an unpriced model is refused before anything is read or sent, a price
given with --prices-file makes the limit hold, and costs against the fake server are printed as simulated.

Every run is the real `rise-batch structure` in a subprocess against the fake server over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.simulated import is_simulated
from tests.conftest import SAMPLE

MODEL = "acme-unpriced-1"


def structure(out: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--corpus", str(SAMPLE), "--out", str(out)]
    cmd += ["--backend", "llm", "--base-url", base_url, "--model", MODEL, "--workers", "0", "--limit", "12"]
    cmd += ["--tpm", "100000000", "--rpm", "100000", "--no-progress", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_max_cost_on_an_unpriced_model_is_refused_before_any_request(tmp_path: Path) -> None:
    with FakeLLMServer() as server:
        proc = structure(tmp_path / "out", server.base_url, "--max-cost", "0.01")
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert err.startswith(
            "rise-batch structure: error: --max-cost 0.01 needs the price of model 'acme-unpriced-1'"
        ), err
        assert "--prices-file" in err and "llm.prices_file" in err and "\n" not in err
        assert server.stats()["requests"] == 0
    assert not (tmp_path / "out" / "checkpoint").exists()  # refused before the scan


def test_a_price_from_prices_file_makes_the_limit_hold(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(f"models:\n  {MODEL}: {{input: 2.0, cached_input: 0.2, output: 10.0}}\n")
    with FakeLLMServer() as server:
        proc = structure(tmp_path / "out", server.base_url, "--max-cost", "0.3", "--prices-file", str(prices))
        assert proc.returncode == 3, proc.stdout + proc.stderr  # stopped by the limit, not run to the end
        assert "would pass --max-cost" in proc.stderr
        sent = server.stats()["requests"]
        assert 0 < sent < 12
        # the same prices without a limit: every document, and the summary says the dollars are simulated
        proc = structure(tmp_path / "out2", server.base_url, "--prices-file", str(prices))
        assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("structure docs_total=12") and "(simulated:" in line, line
    cost = float(line.split("cost_usd=")[1].split()[0])
    assert cost > 0.3  # priced from the file, not $0
    stats = json.loads((tmp_path / "out2" / "stats.json").read_text())
    assert stats["cost_usd"] == cost


def test_a_real_server_is_not_labelled_simulated(tmp_path: Path) -> None:
    """A server that does not send the fake server's header is taken at its word: real money, no label."""
    import http.server
    import threading

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"object": "list", "data": []}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        assert is_simulated(f"http://127.0.0.1:{httpd.server_address[1]}/v1") is False
    finally:
        httpd.shutdown()
        httpd.server_close()
    with FakeLLMServer() as server:
        assert is_simulated(server.base_url) is True
    assert is_simulated(None) is False
