"""The cold path of a process (issue 34): what opening a project loads before anything is asked of it. A server's
`initialize`, `saipling status` and a keyword search open the project and never send an embedding request: the
HTTP client of the configured provider (httpx, httpcore and what they import, and the client's TLS context: ~1/3 s
of CPU) is made with the first request instead. Real processes and a real local server speaking the provider's API
(tests/apiserver.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from saipling.config.settings import Settings
from saipling.embeddings.openai import OpenAIProvider
from saipling.errors import ProviderAbandoned

PROBE = """
import json, sys
from saipling.project import Project
project = Project.open(sys.argv[1])
opened = sorted(m for m in ("httpx", "httpcore", "rich", "pygments") if m in sys.modules)
found = project.search({"query": sys.argv[2], "mode": sys.argv[3], "maxResults": 5})
searched = sorted(m for m in ("httpx", "httpcore", "rich", "pygments") if m in sys.modules)
project.close()
print(json.dumps({"opened": opened, "searched": searched, "results": len(found["results"]),
                  "degraded": found.get("degraded")}))
"""


def _probe(root: Path, query: str, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), query, mode], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _indexed_novel(tmp_path: Path, api_server: FakeEmbeddingAPI, quiet: bool) -> Path:  # noqa: F811
    """A project of one chapter (two with `quiet`) indexed by `saipling index` through the OpenAI-compatible test
    server (8 dimensions)."""
    root = tmp_path / "novel"
    (root / ".saipling").mkdir(parents=True)
    (root / "storm.md").write_text("# Storm\n\nThe storm broke over the harbour at dusk.\n", encoding="utf-8")
    if quiet:
        (root / "quiet.md").write_text("# Quiet\n\nA quiet morning in the orchard.\n", encoding="utf-8")
    (root / ".saipling" / "config.toml").write_text(
        f'provider = "openai"\nbaseUrl = "{api_server.url}/v1"\nmodel = "text-embedding-3-small"\ndimensions = 8\n',
        encoding="utf-8",
    )
    subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--yes"], capture_output=True, timeout=120, check=True
    )
    return root


def test_opening_a_project_with_an_http_provider_loads_no_http_client_until_it_embeds(
    tmp_path: Path,
    api_server: FakeEmbeddingAPI,  # noqa: F811
) -> None:
    root = _indexed_novel(tmp_path, api_server, quiet=True)
    sent = api_server.count
    assert sent > 0  # (the index run embedded the passages)
    keyword = _probe(root, "harbour", "lexical")
    assert keyword["opened"] == [] and keyword["searched"] == []  # open + a keyword search: no HTTP client
    assert keyword["results"] >= 1 and api_server.count == sent
    semantic = _probe(root, "a storm at sea", "semantic")
    # made for the query, without httpx's command-line client (rich and pygments: ~0.1 s of CPU, row S29)
    assert semantic["opened"] == [] and semantic["searched"] == ["httpcore", "httpx"]
    assert semantic["results"] >= 1 and semantic["degraded"] is None and api_server.count == sent + 1


def test_a_provider_abandoned_before_its_first_request_never_connects(api_server: FakeEmbeddingAPI) -> None:  # noqa: F811
    """Shutdown can come before the lazily made client exists: the abort is kept, the client made after it refuses
    at once (no request reaches the server), and a retry's wait is over at once."""
    provider = OpenAIProvider(
        Settings(provider="openai", base_url=api_server.url + "/v1", openai_api_key="sk-test", dimensions=8)
    )
    try:
        provider.abort()
        with pytest.raises(ProviderAbandoned):
            provider.embed_query("hello")
        assert api_server.count == 0
        waited = threading.Event()
        t = threading.Thread(target=lambda: (provider.http.sleep(30.0), waited.set()))
        t.start()
        t.join(5)
        assert waited.is_set()
    finally:
        provider.close()


def test_httpx_loaded_for_a_request_leaves_its_command_line_client_importable() -> None:
    """load_httpx skips httpx._main (rich, pygments) while httpx loads, and only then: an explicit import of the
    CLI module afterwards still works, and httpx's own names are all there."""
    code = (
        "import sys\n"
        "from saipling.embeddings.http import load_httpx\n"
        "httpx = load_httpx()\n"
        "print(sorted(m for m in ('rich', 'pygments', 'httpx._main') if m in sys.modules))\n"
        "assert load_httpx() is httpx and httpx.Client and httpx.ReadTimeout and callable(httpx.main)\n"
        "import httpx._main\n"
        "print(type(httpx._main.main).__name__, 'rich' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "Command True"]


def test_a_second_thread_loading_httpx_meanwhile_gets_it_whole() -> None:
    """Two threads making their first HTTP clients at once (the indexer's embeddings and a query's): the second
    call of load_httpx waits for the first thread's import instead of returning the half-made module (review of
    the merged round: `httpx.Client` missing)."""
    code = (
        "import sys, threading, time\n"
        "class Slow:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'httpx._client':\n"
        "            time.sleep(0.5)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Slow())\n"
        "from saipling.embeddings.http import load_httpx\n"
        "first = threading.Thread(target=load_httpx)\n"
        "first.start()\n"
        "time.sleep(0.1)\n"
        "m = load_httpx()\n"
        "print(hasattr(m, 'Client'))\n"
        "first.join()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"


CLI_PROBE = """
import json, os, sys
from saipling.cli.main import main
try:
    main(sys.argv[1:], prog_name="saipling")
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps({"blas": os.environ.get("OPENBLAS_NUM_THREADS"), "numpy": "numpy" in sys.modules}), file=sys.stderr)
"""


def test_a_one_shot_search_starts_openblas_with_one_thread_unless_the_user_chose(
    tmp_path: Path,
    api_server: FakeEmbeddingAPI,  # noqa: F811
) -> None:
    """The CLI's semantic search loads numpy for one query (no BLAS call worth a second thread): OPENBLAS_NUM_THREADS
    is 1 when numpy loads (~20 ms of CPU less, row S29); a value the user set is kept, and the answer is the same."""
    root = _indexed_novel(tmp_path, api_server, quiet=False)
    env = {k: v for k, v in os.environ.items() if k not in {"OPENBLAS_NUM_THREADS", "OPENAI_API_KEY"}}
    args = ["search", "a storm at sea", "--mode", "semantic", "--json", "--root", str(root)]
    seen = []
    for chosen in (None, "2"):
        run_env = env if chosen is None else env | {"OPENBLAS_NUM_THREADS": chosen}
        out = subprocess.run(
            [sys.executable, "-c", CLI_PROBE, *args], capture_output=True, text=True, env=run_env, timeout=120
        )
        assert out.returncode == 0, out.stderr
        seen.append(json.loads(out.stderr.strip().splitlines()[-1]))
        assert json.loads(out.stdout)["results"][0]["filePath"] == "storm.md"
    assert seen == [{"blas": "1", "numpy": True}, {"blas": "2", "numpy": True}]
