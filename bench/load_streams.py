"""Load test of `citeflow serve`: concurrent streaming chats against a simulated upstream LLM.
It is longer than 400 lines because it is the upstream, the server's launcher and the client in
one script, so that one command runs the whole measurement.

Three processes, so that each one's CPU is its own:

* the upstream: a fake OpenAI server (`citeflow.testing.openai_server.FakeOpenAIServer`, started by
  this script with ``--serve-upstream``) with a fixed time to first token (``--ttft``) and token
  rate (``--tps``); it answers the synthesis prompt with three sentences quoted from the sources,
  each citing its source, (with ``--grader llm``) the grading prompt with three relevant
  passages, and (with ``--judge on``, the server's default for a hosted LLM) the citation judge's
  prompt with "Yes";
* the server: ``citeflow serve`` (real uvicorn) with ``CITEFLOW_LLM_PROVIDER=openai`` at the
  upstream, the real local MiniLM embedder, and embedded Qdrant in a temporary directory into
  which ``data/`` is ingested first (by ``citeflow ingest``, a fourth, short-lived process);
* this process: the client, keeping N streaming chats in flight with aiohttp, each with its own
  question.

Time to first token (TTFT) is measured at the client, from sending the request to the first chunk
with answer text. citeflow streams checked sentences (each sentence's citations are verified
before it is sent), so the earliest it could send its first token is when the upstream has sent
the token that completes the answer's first sentence: the *upstream reference* is that time,
``ttft + k / tps`` with k the index of that token (the fake upstream's own schedule), plus, with
``--grader llm``, the grading call (``ttft + (g - 1) / tps`` for its g-token reply), and with
``--judge on`` the judge's call on that sentence's citation (``ttft``: a one-token reply). The
*added* TTFT is the client's TTFT minus the upstream reference: citeflow's own work (HTTP,
embedding the question, search, citation chunking, prompt building, the upstream call's client
side, sentence checking, SSE) plus its queueing under load. The TTFT minus the upstream ``ttft``
alone is printed too.

Each level keeps N streams in flight, each client sending its next question as soon as its
answer has ended. By default the N clients start one after another over the duration of one
answer, so that requests arrive evenly (as from N users), and the latencies are those of the
requests sent once all N streams run; ``--ramp 0`` starts them all at once instead: the first
requests then arrive as one burst, and the waves stay synchronized.

    .venv/bin/python bench/load_streams.py [--concurrency 1,16,64] [--requests-per-level N]
        [--ttft 0.5] [--tps 50] [--grader score|llm] [--judge on|off] [--ramp SECONDS]

Targets at 64 concurrent: 0 errors, added TTFT p50 <= 100 ms and p95 <= 300 ms, peak RSS of the
server <= 1.5 GB.

One file of about 600 lines on purpose: the script is the client, starts itself as the upstream
(``--serve-upstream``) and starts the server, so one command runs the whole experiment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

from citeflow.citations.stream import SentenceStream
from citeflow.testing.openai_replies import last_user_text
from citeflow.testing.openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Reply,
    default_reply,
    split_tokens,
)
from common import ROOT, proc_status_kb

COLLECTION = "essay"
MODEL = f"citeflow-{COLLECTION}"
API_KEY = "bench-key"
#: Words quoted from a source per answer sentence (the first sentence's length is fixed).
SENTENCE_WORDS = 10
GRADE_REPLY = '{"relevant": [1, 2, 3]}'
#: an answer sentence of the fake upstream's length
TEMPLATE = " ".join(["Word"] * SENTENCE_WORDS) + " [1]."

TOPICS = [
    "writing short stories before college",
    "programming the IBM 1401 in ninth grade",
    "the TRS-80 microcomputer",
    "studying philosophy in college",
    "switching to artificial intelligence",
    "the Lisp programming language",
    "the book On Lisp",
    "graduate school at Harvard",
    "painting and art school",
    "the Accademia in Florence",
    "RISD",
    "working at Interleaf",
    "living in New York",
    "starting Viaweb",
    "the online store builder",
    "selling Viaweb to Yahoo",
    "working at Yahoo",
    "writing essays on the web",
    "Y Combinator",
    "the Summer Founders Program",
    "Hacker News",
    "Arc, the new Lisp dialect",
    "Jessica Livingston",
    "Robert Morris",
    "Trevor Blackwell",
    "the author's mother",
    "moving to England",
    "Bel, the Lisp interpreter",
    "McCarthy's 1960 paper",
    "angel investing",
]
FORMS = [
    "What does the author say about {}?",
    "What happened with {}?",
    "Why did {} matter to the author?",
    "Tell me about {} in the essay.",
    "How did {} shape the author's path?",
    "What did the author learn from {}?",
    "When did {} come up in the author's life?",
    "Summarize the part about {}.",
    "What role did {} play?",
    "Describe {} according to the essay.",
]


def questions(count: int, offset: int = 0) -> list[str]:
    """``count`` distinct questions about the essay (distinct over the whole run)."""
    out = []
    for i in range(offset, offset + count):
        topic, form = TOPICS[i % len(TOPICS)], FORMS[(i // len(TOPICS)) % len(FORMS)]
        question = form.format(topic)
        if i >= len(TOPICS) * len(FORMS):
            question += f" (question {i})"
        out.append(question[0].upper() + question[1:])
    return out


# --- the upstream (its own process) --------------------------------------------------------------
def _sentence(text: str, number: int, part: int = 0) -> str:
    start = part * SENTENCE_WORDS
    words = re.findall(r"[A-Za-z0-9']+", text)[start : start + SENTENCE_WORDS]
    words += ["indeed"] * (SENTENCE_WORDS - len(words))
    words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words) + f" [{number}]."


def answer(prompt: str, sentences: int = 3) -> str:
    """``sentences`` sentences, each quoting words of one source and citing it (in turn)."""
    sources = re.findall(r"^\[(\d+)\][^\n]*\n([^\n]+)", prompt.split("Sources:", 1)[-1], re.M)
    sources = sources[:3]
    return " ".join(
        _sentence(sources[i % len(sources)][1], int(sources[i % len(sources)][0]), i // 3)
        for i in range(sentences)
    )


def respond(request: RecordedRequest, sentences: int = 3) -> str | Reply:
    prompt = last_user_text(request)
    if prompt.startswith("Which passages help answer"):
        return GRADE_REPLY
    if prompt.startswith("Passage:"):
        return "Yes"  # the citation judge (CITEFLOW_CITATION_JUDGE): the quote supports it
    if "\nSources:\n" in prompt:
        return answer(prompt, sentences)
    return default_reply(request)


def serve_upstream(args: argparse.Namespace) -> None:
    """Run the fake upstream until killed, printing its base URL first."""
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before any thread starts: sigwait gets them
    server = FakeOpenAIServer(
        lambda request: respond(request, args.sentences),
        ttft=args.ttft,
        tokens_per_second=args.tps,
        record=False,
    )
    with server:
        print(server.openai_base_url, flush=True)
        signal.sigwait(stop)


# --- timing reference ----------------------------------------------------------------------------
def first_sentence_token(text: str) -> int:
    """Index of the stream token whose arrival completes the first sentence of ``text``."""
    stream = SentenceStream()
    for index, token in enumerate(split_tokens(text)):
        if stream.feed(token):
            return index
    return len(split_tokens(text)) - 1


def upstream_seconds(args: argparse.Namespace, token: int, judged: int = 1) -> float:
    """Seconds until the upstream sends the answer's token number ``token`` (from 0), its
    grading call (``--grader llm``) included, and the one-token replies of the citation judge
    for the ``judged`` sentences before it is sent (``--judge on``: one call per cited
    sentence, each after the last)."""
    seconds = args.ttft + token / args.tps
    if args.grader == "llm":
        seconds += args.ttft + (len(split_tokens(GRADE_REPLY)) - 1) / args.tps
    if args.judge == "on":
        seconds += judged * args.ttft
    return seconds


def stream_seconds(args: argparse.Namespace) -> float:
    """Seconds the upstream takes for one whole answer (and grading and judge calls)."""
    tokens = len(split_tokens(" ".join([TEMPLATE] * args.sentences)))
    return upstream_seconds(args, tokens - 1, judged=args.sentences)


def upstream_reference(args: argparse.Namespace) -> float:
    """Seconds the upstream itself needs to deliver the answer's first complete sentence (and,
    with the judge on, to judge its citation)."""
    return upstream_seconds(args, first_sentence_token(f"{TEMPLATE} {TEMPLATE} {TEMPLATE}"))


# --- processes -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU time of a process (all its threads), or of its thread ``tid``."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_env(tmp: Path, upstream: str, args: argparse.Namespace, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEFLOW_")}
    return env | dict(
        CITEFLOW_DATA_DIR=str(tmp / "data"),
        CITEFLOW_COLLECTION=COLLECTION,
        CITEFLOW_LLM_PROVIDER="openai",
        CITEFLOW_OPENAI_BASE_URL=upstream,
        CITEFLOW_OPENAI_API_KEY="upstream-key",
        CITEFLOW_LLM_MODEL="fake-model",
        CITEFLOW_GRADER=args.grader,
        CITEFLOW_CITATION_JUDGE=args.judge,
        CITEFLOW_API_KEYS=json.dumps([API_KEY]),
        CITEFLOW_HOST="127.0.0.1",
        CITEFLOW_PORT=str(port),
    )


async def wait_ready(url: str, process: subprocess.Popen[bytes], within: float = 180) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"citeflow serve exited with status {process.returncode}")
            try:
                if (await client.get(f"{url}/health/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("citeflow serve did not become ready")


# --- the client ----------------------------------------------------------------------------------
@dataclass
class Outcome:
    start: float = 0.0
    ttft: float | None = None
    error: str | None = None
    retried: bool = False


@dataclass
class Level:
    concurrency: int
    outcomes: list[Outcome] = field(default_factory=list)
    all: list[Outcome] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0
    loop_cpu: float = 0.0  # the main thread's: the event loop (everything under the GIL there)
    client_cpu: float = 0.0  # this process's (the load generator's)
    upstream_cpu: float = 0.0  # the fake upstream's
    rss_kb: int = 0
    hwm_kb: int = 0


def _has_text(data: str) -> bool:
    choices = json.loads(data).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


async def chat(client: aiohttp.ClientSession, question: str) -> Outcome:
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": question}]}
    outcome = Outcome()
    started = time.perf_counter()
    done = False
    try:
        async with client.post("/v1/chat/completions", json=body) as response:
            if response.status != 200:
                await response.read()
                outcome.error = f"HTTP {response.status}"
                return outcome
            async for raw in response.content:  # one SSE line at a time
                if not raw.startswith(b"data: "):
                    continue
                data = raw[6:].decode().rstrip()
                if data == "[DONE]":
                    done = True
                elif data.startswith('{"error"'):
                    outcome.error = json.loads(data)["error"]["type"]
                elif outcome.ttft is None and data.startswith('{"id"') and _has_text(data):
                    outcome.ttft = time.perf_counter() - started
                elif '"type":"status"' in data and "retry" in data:
                    outcome.retried = True
    except (TimeoutError, aiohttp.ClientError) as exc:
        outcome.error = type(exc).__name__
    if outcome.error is None and (not done or outcome.ttft is None):
        outcome.error = "incomplete stream"
    return outcome


def session(url: str, connections: int) -> aiohttp.ClientSession:
    """The client: aiohttp (C HTTP parser), so that on a 2-core machine the load generator takes
    as little CPU as it can from the server it measures: 1.1 ms per answer at 64 streams, httpx
    3.3 ms."""
    return aiohttp.ClientSession(
        base_url=url,
        headers={"Authorization": f"Bearer {API_KEY}"},
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=120),
    )


async def run_level(
    url: str, pid: int, concurrency: int, count: int, offset: int, ramp: float
) -> tuple[Level, int]:
    """``count`` chats, ``concurrency`` in flight at any time.

    The streams start ``ramp * i / concurrency`` seconds apart (0: all at once); the outcomes kept
    are those of the requests sent once every stream had started (the steady state).
    """
    level = Level(concurrency)
    pending = iter(questions(count, offset))
    async with session(url, concurrency + 4) as client:

        async def worker(index: int) -> None:
            await asyncio.sleep(ramp * index / concurrency)
            for question in pending:
                sent = time.perf_counter() - started
                outcome = await chat(client, question)
                outcome.start = sent
                outcomes.append(outcome)

        outcomes: list[Outcome] = []
        cpu, loop_cpu = cpu_seconds(pid), cpu_seconds(pid, pid)
        upstream_pid = PROCESSES["upstream"].pid
        client_cpu, upstream_cpu = time.process_time(), cpu_seconds(upstream_pid)
        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        level.wall = time.perf_counter() - started
        level.cpu = cpu_seconds(pid) - cpu
        level.loop_cpu = cpu_seconds(pid, pid) - loop_cpu
        level.client_cpu = time.process_time() - client_cpu
        level.upstream_cpu = cpu_seconds(upstream_pid) - upstream_cpu
        last_start = ramp * (concurrency - 1) / concurrency
        level.outcomes = [o for o in outcomes if o.start >= last_start] if ramp else outcomes
        level.all = outcomes
    memory = proc_status_kb(pid, "VmRSS", "VmHWM")
    level.rss_kb, level.hwm_kb = memory["VmRSS"], memory["VmHWM"]
    return level, offset + count


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def report(levels: list[Level], reference: float, args: argparse.Namespace) -> bool:
    grading = ", grading call included" if args.grader == "llm" else ""
    grading += ", the judge's call included" if args.judge == "on" else ""
    print(
        f"\nupstream: ttft {args.ttft * 1000:.0f} ms, {args.tps:g} tokens/s; reference (upstream's"
        f" own time to the first complete sentence{grading}) {reference * 1000:.0f} ms;"
        f" grader {args.grader}, citation judge {args.judge}"
    )
    ramp = stream_seconds(args) if args.ramp is None else args.ramp
    print(
        f"arrivals: each level's streams start over {ramp:.2f} s, then run back to back; "
        "latencies of the requests sent after that"
        if ramp
        else "arrivals: each level's streams start at once, then run back to back"
    )
    head = (
        f"{'concurrent':>10} {'requests':>8} {'timed':>5} {'errors':>6} {'retried':>7} "
        f"{'TTFT p50':>8} {'p95':>6} {'added p50':>9} {'p95':>6} {'-ttft p50':>9} {'p95':>6} "
        f"{'req/s':>6} {'CPU s':>6} {'CPU ms/ans':>10} {'loop':>5} {'RSS MB':>6} {'peak MB':>7} "
        f"{'client':>6} {'upstr':>5}"
    )
    print(head)
    print("-" * len(head))
    ok = True
    for level in levels:
        ttfts = [o.ttft * 1000 for o in level.outcomes if o.ttft is not None]
        errors = sum(o.error is not None for o in level.all)
        retried = sum(o.retried for o in level.all)
        ms = reference * 1000
        p50, p95 = (percentile(ttfts, 0.5), percentile(ttfts, 0.95)) if ttfts else (0.0, 0.0)
        upstream_ttft = args.ttft * 1000
        print(
            f"{level.concurrency:>10} {len(level.all):>8} {len(level.outcomes):>5} {errors:>6} "
            f"{retried:>7} "
            f"{p50:>8.0f} {p95:>6.0f} {p50 - ms:>9.0f} {p95 - ms:>6.0f} "
            f"{p50 - upstream_ttft:>9.0f} {p95 - upstream_ttft:>6.0f} "
            f"{len(level.all) / level.wall:>6.1f} {level.cpu:>6.1f} "
            f"{1000 * level.cpu / max(1, len(level.all)):>10.1f} "
            f"{1000 * level.loop_cpu / max(1, len(level.all)):>5.1f} "
            f"{level.rss_kb / 1024:>6.0f} {level.hwm_kb / 1024:>7.0f} "
            f"{1000 * level.client_cpu / max(1, len(level.all)):>6.1f} "
            f"{1000 * level.upstream_cpu / max(1, len(level.all)):>5.1f}"
        )
        kinds = sorted({o.error for o in level.all if o.error})
        if kinds:
            print(f"{'':>10} errors: {', '.join(kinds)}")
        if level.concurrency == max(lv.concurrency for lv in levels):
            ok = (
                errors == 0
                and p50 - ms <= 100
                and p95 - ms <= 300
                and level.hwm_kb <= 1.5 * 1024 * 1024
            )
    print(
        "TTFT: request sent -> first answer text, at the client (ms); added: TTFT - reference; "
        "-ttft: TTFT - upstream ttft;\nCPU s: the server's CPU time in the level (user + system, "
        "all threads); CPU ms/ans: that per answer (robust to other load on the machine); loop: "
        "the event loop's (main thread's) share of it; peak: the server's VmHWM since it started;"
        "\nclient, upstr: CPU ms per answer of the load generator and of the fake upstream, which "
        "share the machine's cores with the server"
    )
    print(
        f"targets at {max(lv.concurrency for lv in levels)} concurrent: 0 errors, added p50 <= 100"
        f" ms, p95 <= 300 ms, peak RSS <= 1.5 GB: {'met' if ok else 'NOT met'}"
    )
    return ok


async def bench(args: argparse.Namespace, url: str, pid: int) -> list[Level]:
    await wait_ready(url, PROCESSES["server"])
    offset = 0
    async with session(url, 8) as client:  # warm-up: first model calls, pools, lazy workflows
        for question in questions(args.warmup, 10_000):
            outcome = await chat(client, question)
            if outcome.error:
                raise RuntimeError(f"warm-up request failed: {outcome.error}")
    profiler = start_profiler(args.profile, pid, args.profile_native) if args.profile else None
    levels = []
    try:
        for concurrency in args.concurrency:
            count = args.requests_per_level or max(16, 3 * concurrency)
            ramp = stream_seconds(args) if args.ramp is None else args.ramp
            level, offset = await run_level(url, pid, concurrency, count, offset, ramp)
            levels.append(level)
            print(f"  {concurrency} concurrent: {count} requests in {level.wall:.1f} s", flush=True)
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            profiler.wait(60)
            print(f"  profile of the server over the levels: {args.profile}", flush=True)
    return levels


def start_profiler(path: str, pid: int, native: bool = False) -> subprocess.Popen[bytes]:
    """py-spy sampling the server's thread that holds the GIL (``--gil``: the Python work that
    competes for the one interpreter), without pausing it; or, ``native``, every thread with its
    C frames (gc, uvloop, aiohttp's parser), pausing the server for each sample (slower, but
    without the non-blocking mode's bias towards threads sitting in system calls). The output
    format follows ``path``'s suffix: ``.svg`` a flame graph, ``.json`` speedscope, anything else
    py-spy's raw format."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    form = {".svg": "flamegraph", ".json": "speedscope"}.get(Path(path).suffix, "raw")
    mode = ("--native", "--rate", "100") if native else ("--nonblocking", "--gil", "--rate", "250")
    command = [py_spy, "record", "--pid", str(pid), *mode, "--format", form, "--output", path]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


PROCESSES: dict[str, subprocess.Popen[bytes]] = {}


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 16, 64],
        help="comma-separated levels of streams in flight (default 1,16,64)",
    )
    parser.add_argument(
        "--requests-per-level", type=int, default=0, help="default: 3 x concurrency, at least 16"
    )
    parser.add_argument("--ttft", type=float, default=0.5, help="upstream time to first token (s)")
    parser.add_argument("--tps", type=float, default=50.0, help="upstream tokens per second")
    parser.add_argument("--grader", choices=["score", "llm"], default="score")
    parser.add_argument(
        "--judge",
        choices=["on", "off"],
        default="on",
        help="the LLM citation judge (CITEFLOW_CITATION_JUDGE; on: the default for a hosted LLM)",
    )
    parser.add_argument("--warmup", type=int, default=4, help="sequential requests first")
    parser.add_argument(
        "--ramp",
        type=float,
        default=None,
        help="seconds over which the streams of a level start (0: all at once; default: one "
        "stream's duration, so that requests arrive evenly); latencies are those of the "
        "requests sent after the ramp",
    )
    parser.add_argument(
        "--sentences",
        type=int,
        default=3,
        help=f"sentences per answer, {SENTENCE_WORDS + 1} tokens each",
    )
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="record the server's GIL holder with py-spy over the levels (after the warm-up): .svg "
        "flame graph, .json speedscope, else py-spy's raw (collapsed stacks) format",
    )
    parser.add_argument(
        "--profile-native",
        action="store_true",
        help="with --profile: every thread, C frames included (pauses the server per sample)",
    )
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args)
        return

    python = sys.executable
    citeflow = str(Path(python).with_name("citeflow"))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="citeflow-load-") as name:
        tmp = Path(name)
        try:
            upstream = subprocess.Popen(
                [
                    *(python, __file__, "--serve-upstream"),
                    *(f"--ttft={args.ttft}", f"--tps={args.tps}", f"--sentences={args.sentences}"),
                ],
                stdout=subprocess.PIPE,
                cwd=ROOT,
            )
            PROCESSES["upstream"] = upstream
            assert upstream.stdout is not None
            upstream_url = upstream.stdout.readline().decode().strip()
            if not upstream_url:
                raise RuntimeError("the fake upstream did not start")
            port = free_port()
            env = server_env(tmp, upstream_url, args, port)
            started = time.perf_counter()
            subprocess.run(
                [citeflow, "ingest", str(ROOT / "data"), "--quiet"],
                env=env,
                cwd=tmp,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            print(f"ingested data/ in {time.perf_counter() - started:.1f} s", flush=True)
            log = (tmp / "server.log").open("wb")
            server = subprocess.Popen(
                [citeflow, "serve"], env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT
            )
            PROCESSES["server"] = server
            url = f"http://127.0.0.1:{port}"
            levels = asyncio.run(bench(args, url, server.pid))
        except BaseException:
            server_log = tmp / "server.log"
            if server_log.exists():
                sys.stderr.write(server_log.read_text()[-4000:])
            raise
        finally:
            for process in PROCESSES.values():
                stop(process)
            shutil.rmtree(tmp, ignore_errors=True)
    ok = report(levels, upstream_reference(args), args)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
