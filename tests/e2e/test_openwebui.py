"""End to end: real Open WebUI 0.12.4 in headless Chromium, connected to a live `citeflow serve`.

Processes: a fake OpenAI server as citeflow's LLM (`fake_llm.CitingLLM`: it copies one sentence
from each of two sources of different documents, with their markers), ``citeflow serve`` with the
real local embedder and embedded Qdrant over ``data/`` plus one small second document
(``tests/e2e/docs/duck-care.md``, so that two chips name two different files), and Open WebUI in
its own venv (``.e2e/owui``) with citeflow as its OpenAI connection. ``openwebui_chat.cjs`` asks
the question in the UI and reports what the page shows; this test checks it against what the LLM
cited:

* the inline chips name the cited files, in citation order;
* each chip opens a popup with the cited text, titled with the file name and linked to
  citeflow (its document URL);
* the sources list holds exactly the cited sources, not the other sources the LLM was given;
* all of the above again after loading the chat's URL afresh (the sources were saved);
* then the same question through a **Direct Connection** (the browser calls citeflow itself, over
  CORS; Open WebUI ignores source events from it since CVE-2025-64496 and reads ``url_citation``
  annotations instead): the chips name the cited files in citation order and link to citeflow,
  live and after a reload.

Set up by ``tests/e2e/setup.sh`` (``make e2e`` runs it, then this test). Without that set-up the
test is skipped, unless ``CITEFLOW_E2E_REQUIRED=1`` (set by ``make e2e``), where it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from citeflow.testing.openai_server import FakeOpenAIServer
from tests.e2e.fake_llm import CitingLLM
from tests.e2e.procs import Server, free_port

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
E2E_DIR = REPO / ".e2e"
ARTIFACTS = E2E_DIR / "artifacts"
OPEN_WEBUI = E2E_DIR / "owui" / "bin" / "open-webui"
PLAYWRIGHT_CORE = E2E_DIR / "node_modules" / "playwright-core"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CITEFLOW = REPO / ".venv" / "bin" / "citeflow"
DRIVER = HERE / "openwebui_chat.cjs"

DOCUMENTS = [REPO / "data", HERE / "docs"]
COLLECTION = "e2e"
MODEL = f"citeflow-{COLLECTION}"
#: the same model through the browser's Direct Connection (Open WebUI prefixes its ids)
DIRECT_PREFIX = "direct"
DIRECT_MODEL = f"{DIRECT_PREFIX}.{MODEL}"
API_KEY = "e2e-citeflow-key"
#: a two-part question, so that the answer cites two files; the essay part names what its answer
#: sentence says ("outside of school"), so that a quote of it bears on the question
QUESTION = (
    "What did the author work on outside of school before college, and what do pet ducks eat?"
)
#: read at import: the suite's autouse fixture removes CITEFLOW_* variables before each test
REQUIRED = os.environ.get("CITEFLOW_E2E_REQUIRED") == "1"


def _missing() -> list[str]:
    checks = {
        "Open WebUI (.e2e/owui)": OPEN_WEBUI.exists(),
        "playwright-core (.e2e/node_modules)": (PLAYWRIGHT_CORE / "package.json").exists(),
        f"chromium ({CHROMIUM})": CHROMIUM.exists(),
        "node": shutil.which("node") is not None,
        "citeflow (.venv)": CITEFLOW.exists(),
    }
    return [name for name, ok in checks.items() if not ok]


@pytest.fixture(scope="module", autouse=True)
def _e2e_environment() -> None:
    missing = _missing()
    if missing:
        reason = "e2e environment not set up (`make e2e` sets it up): missing " + ", ".join(missing)
        if REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _base_env() -> dict[str, str]:
    """This process's environment without citeflow's settings (each server gets its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CITEFLOW_")}


def _open_webui_models(url: str) -> list[str]:
    """The model ids Open WebUI offers (auth is off: an empty sign-in gives a token)."""
    with httpx.Client(base_url=url, timeout=30) as client:
        signin = client.post("/api/v1/auths/signin", json={"email": "", "password": ""})
        signin.raise_for_status()
        token = signin.json()["token"]
        models = client.get("/api/models", headers={"authorization": f"Bearer {token}"})
        models.raise_for_status()
        return [str(m["id"]) for m in models.json()["data"]]


def _add_direct_connection(url: str, citeflow_url: str) -> None:
    """Give Open WebUI's (only) user a Direct Connection to citeflow, as its Settings >
    Connections page saves one."""
    with httpx.Client(base_url=url, timeout=30) as client:
        signin = client.post("/api/v1/auths/signin", json={"email": "", "password": ""})
        signin.raise_for_status()
        headers = {"authorization": f"Bearer {signin.json()['token']}"}
        connections = {
            "OPENAI_API_BASE_URLS": [f"{citeflow_url}/v1"],
            "OPENAI_API_KEYS": [API_KEY],
            "OPENAI_API_CONFIGS": {"0": {"enable": True, "prefix_id": DIRECT_PREFIX}},
        }
        saved = client.post(
            "/api/v1/users/user/settings/update",
            json={"ui": {"directConnections": connections}},
            headers=headers,
        )
        saved.raise_for_status()


def _ask_in_browser(
    url: str, servers: list[Server], *, model: str = MODEL, artifacts: Path = ARTIFACTS
) -> dict[str, Any]:
    artifacts.mkdir(parents=True, exist_ok=True)
    config = {"url": url, "model": model, "question": QUESTION, "artifacts": str(artifacts)}
    env = {**_base_env(), "PLAYWRIGHT_CORE": str(PLAYWRIGHT_CORE), "CHROMIUM": str(CHROMIUM)}
    # its own process group, so that a timeout also ends the browser node started
    node = subprocess.Popen(
        ["node", str(DRIVER), json.dumps(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = node.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)
        stdout, stderr = node.communicate()
        stderr += "\n[test] the browser run timed out after 300 s"
    (artifacts / "browser.log").write_text(stderr)
    if node.returncode != 0:
        tails = "\n".join(f"--- {s.name} log:\n{s.log_tail(25)}" for s in servers)
        raise AssertionError(
            f"the browser run failed (artifacts in {artifacts}):\n{stderr[-4000:]}\n{tails}"
        )
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def test_open_webui_shows_citeflow_citations(tmp_path: Path) -> None:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    llm = CitingLLM()
    started = time.monotonic()
    timings: dict[str, float] = {}
    citeflow_port, webui_port = free_port(), free_port()
    citeflow_url = f"http://127.0.0.1:{citeflow_port}"
    webui_url = f"http://127.0.0.1:{webui_port}"

    with ExitStack() as stack:
        fake = stack.enter_context(FakeOpenAIServer(llm, tokens_per_second=40))
        # Open WebUI first: it takes longest to start, and reads citeflow's models only when asked
        webui_env = {
            **_base_env(),
            "DATA_DIR": str(tmp_path / "open-webui"),
            "WEBUI_AUTH": "False",
            "WEBUI_SECRET_KEY": "citeflow-e2e",
            "OFFLINE_MODE": "true",
            "HF_HUB_OFFLINE": "1",
            "RAG_EMBEDDING_ENGINE": "openai",
            "ENABLE_OLLAMA_API": "False",
            "OPENAI_API_BASE_URL": f"{citeflow_url}/v1",
            "OPENAI_API_KEY": API_KEY,
            "ENABLE_DIRECT_CONNECTIONS": "true",
            "ANONYMIZED_TELEMETRY": "false",
            "DO_NOT_TRACK": "true",
            "SCARF_NO_ANALYTICS": "true",
        }
        webui_argv = [str(OPEN_WEBUI), "serve", "--host", "127.0.0.1", "--port", str(webui_port)]
        webui = stack.enter_context(
            Server("open-webui", webui_argv, env=webui_env, cwd=tmp_path, log_dir=ARTIFACTS)
        )

        citeflow_env = {
            **_base_env(),
            "CITEFLOW_DATA_DIR": str(tmp_path / "citeflow"),
            "CITEFLOW_LLM_PROVIDER": "openai",
            "CITEFLOW_LLM_MODEL": "fake-model",
            "CITEFLOW_OPENAI_BASE_URL": fake.openai_base_url,
            "CITEFLOW_OPENAI_API_KEY": "fake-key",
            # keep every retrieved chunk: the LLM is given more sources than it cites
            "CITEFLOW_GRADER": "none",
            "CITEFLOW_API_KEYS": json.dumps([API_KEY]),
            "CITEFLOW_HOST": "127.0.0.1",
            "CITEFLOW_PORT": str(citeflow_port),
            # the Direct Connection: Open WebUI's page calls citeflow from the browser
            "CITEFLOW_CORS_ORIGINS": webui_url,
        }
        ingest = subprocess.run(
            [str(CITEFLOW), "ingest", "-q", "-c", COLLECTION, *map(str, DOCUMENTS)],
            env=citeflow_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        timings["ingested"] = time.monotonic() - started
        citeflow_argv = [str(CITEFLOW), "serve"]
        citeflow = stack.enter_context(
            Server("citeflow", citeflow_argv, env=citeflow_env, cwd=tmp_path, log_dir=ARTIFACTS)
        )
        citeflow.wait_ready(f"{citeflow_url}/health/ready", timeout=180)
        timings["citeflow ready"] = time.monotonic() - started
        webui.wait_ready(f"{webui_url}/health", timeout=240)
        timings["open-webui ready"] = time.monotonic() - started
        assert MODEL in _open_webui_models(webui_url), "Open WebUI does not list citeflow's model"

        seen = _ask_in_browser(webui_url, [webui, citeflow])
        timings["browser done"] = time.monotonic() - started
        _add_direct_connection(webui_url, citeflow_url)
        direct = _ask_in_browser(
            webui_url, [webui, citeflow], model=DIRECT_MODEL, artifacts=ARTIFACTS / "direct"
        )
        timings["direct connection done"] = time.monotonic() - started
    timings["stopped"] = time.monotonic() - started
    (ARTIFACTS / "timings.json").write_text(json.dumps(timings, indent=2))
    (ARTIFACTS / "observed.json").write_text(json.dumps(seen, indent=2))
    (ARTIFACTS / "direct" / "observed.json").write_text(json.dumps(direct, indent=2))

    # --- what citeflow's LLM was given and cited ------------------------------------------------
    assert len(llm.answers) == 2, f"two answers expected, the LLM gave {len(llm.answers)}"
    answer = llm.answers[0]
    assert len(answer.cited) == 2, answer
    uncited = [b for b in answer.sources if b.number not in {n for n, _ in answer.cited}]
    assert uncited, "the LLM must be given sources it does not cite"
    files = {p.name: _flat(p.read_text()) for d in DOCUMENTS for p in d.iterdir() if p.is_file()}
    expected: list[tuple[str, str]] = []  # (file name, cited sentence) in citation order
    for _, sentence in answer.cited:
        owners = [name for name, text in files.items() if _flat(sentence) in text]
        assert len(owners) == 1, (sentence, owners)
        expected.append((owners[0], sentence))
    names = [name for name, _ in expected]
    assert sorted(names) == ["duck-care.md", "paul_graham_essay.txt"]

    # --- what Open WebUI shows, live and after a reload -----------------------------------------
    assert re.search(r"/c/[\w-]+$", seen["chatUrl"]), seen["chatUrl"]
    for view in ("live", "reloaded"):
        shown = seen[view]
        where = f"({view}; artifacts in {ARTIFACTS})"
        text = _flat(shown["answer"])
        for _, sentence in expected:
            assert _flat(sentence.rstrip(".")) in text, (view, text)
        assert not re.search(r"\[\d+\]", text), f"a marker was not turned into a chip {where}"

        # the inline chips carry the cited files' names, in citation order
        assert [c["label"] for c in shown["chips"]] == [f"View source: {n}" for n in names], where
        assert [c["text"] for c in shown["chips"]] == names, where

        # each chip opens the text it cites, titled and linked to citeflow's document
        assert [p["label"] for p in shown["popups"]] == [f"View source: {n}" for n in names]
        for popup, (name, sentence) in zip(shown["popups"], expected, strict=True):
            assert _flat(sentence) in _flat(popup["text"]), (view, name, popup["text"])
            assert popup["text"].lstrip().startswith(name), (view, popup["text"][:80])
            assert str(popup["href"]).startswith(f"{citeflow_url}/"), popup["href"]

        # only the cited sources are listed: 2 of the sources the LLM was given
        assert shown["sources"]["toggle"] == f"Toggle {len(names)} sources", where
        items = shown["sources"]["items"]
        assert [i["label"] for i in items] == [
            f"View source: {k} {name}" for k, name in enumerate(names, start=1)
        ], where

    # --- the Direct Connection: chips from url_citation annotations, live and after a reload ----
    direct_answer = llm.answers[1]
    assert len(direct_answer.cited) == 2, direct_answer
    direct_names = []
    for _, sentence in direct_answer.cited:
        owners = [name for name, text in files.items() if _flat(sentence) in text]
        assert len(owners) == 1, (sentence, owners)
        direct_names.append(owners[0])
    assert re.search(r"/c/[\w-]+$", direct["chatUrl"]), direct["chatUrl"]
    assert direct["chatUrl"] != seen["chatUrl"]
    for view in ("live", "reloaded"):
        shown = direct[view]
        where = f"(direct, {view}; artifacts in {ARTIFACTS / 'direct'})"
        text = _flat(shown["answer"])
        for _, sentence in direct_answer.cited:
            assert _flat(sentence.rstrip(".")) in text, (view, text)
        assert not re.search(r"\[\d+\]", text), f"a marker was not turned into a chip {where}"
        assert [c["text"] for c in shown["chips"]] == direct_names, where
        for popup, name in zip(shown["popups"], direct_names, strict=True):
            assert name in popup["text"], (where, popup["text"][:80])
            assert str(popup["href"]).startswith(f"{citeflow_url}/v1/documents/"), popup["href"]
        assert shown["sources"]["toggle"] == f"Toggle {len(direct_names)} sources", where
