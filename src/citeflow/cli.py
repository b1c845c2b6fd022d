"""The ``citeflow`` command: ingest, ask, delete, reindex, migrate, optimize, documents,
collections, models, serve.

Every user-fixable problem ends in one line ``citeflow: error: ...`` and exit status 1; progress
and status go to stderr, answers to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from citeflow.errors import CiteflowError
from citeflow.settings import Settings, load_settings

if TYPE_CHECKING:
    from citeflow.store import DocumentRecord, Store


def _settings(args: argparse.Namespace) -> Settings:
    """The settings, with the command's ``--collection``, ``--host`` and ``--port`` on top."""
    store: dict[str, object] = {}
    if getattr(args, "collection", None):
        from citeflow.names import check_collection_name

        store["collection"] = check_collection_name(args.collection)
    server = {name: getattr(args, name) for name in ("host", "port") if getattr(args, name, None)}
    return load_settings(store=store, server=server)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _announce(settings: Settings) -> None:
    from citeflow.providers.describe import describe_providers

    _say(describe_providers(settings))


# --- commands ------------------------------------------------------------------------------------
def cmd_ingest(args: argparse.Namespace) -> int:
    from citeflow.knowledge_base import KnowledgeBase

    settings = _settings(args)
    _announce(settings)
    with closing(KnowledgeBase.open(settings=settings)) as kb:
        report = kb.ingest(args.paths, prune=args.prune, progress=not args.quiet)
        _build_index(kb.store, settings.store.collection, quiet=args.quiet)
    print(f"{settings.store.collection}: {report.summary()}")
    return 0 if report.files or not report.skipped else 1


def _build_index(store: Store, collection: str, *, quiet: bool) -> bool:
    """Build the embedded store's search index of what was just written (see
    `citeflow.store.edge`: it holds the process, so it runs here and never in the server)."""
    import time

    if not store.embedded:
        return False
    started = time.perf_counter()
    built = store.optimize(collection)
    if built and not quiet:
        _say(f"{collection}: indexed for search in {time.perf_counter() - started:.1f} s")
    return built


def cmd_migrate(args: argparse.Namespace) -> int:
    from citeflow.store import Store

    settings = load_settings()
    if settings.store.qdrant_url:
        raise CiteflowError(
            "citeflow migrate moves an embedded store; CITEFLOW_QDRANT_URL names a Qdrant "
            "server, which needs no migration"
        )
    with closing(Store.open_path(settings.store.qdrant_path, progress=not args.quiet)) as store:
        for collection in store.collections():
            _build_index(store, collection, quiet=args.quiet)
            print(f"{collection}: {store.count(collection)} chunks, embedded engine")
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    from citeflow.store import Store

    settings = _settings(args)
    with closing(Store.open(settings.store)) as store:
        store.require(settings.store.collection)
        if not _build_index(store, settings.store.collection, quiet=False):
            _say(f"{settings.store.collection}: nothing to index")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from citeflow.knowledge_base import KnowledgeBase

    settings = _settings(args)
    with closing(KnowledgeBase.open(settings=settings)) as kb:
        removed = kb.delete(args.paths) if args.paths else 0
        if args.prune:
            removed += kb.prune()
    print(f"{settings.store.collection}: {removed} documents removed")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from citeflow.bm25 import BM25Encoder
    from citeflow.store import Store

    settings = _settings(args)
    with closing(Store.open(settings.store)) as store:
        points = store.add_keyword_index(settings.store.collection, BM25Encoder())
    print(f"{settings.store.collection}: {points} chunks with dense and keyword (BM25) vectors")
    return 0


def cmd_documents(args: argparse.Namespace) -> int:
    from citeflow.store import Store

    settings = _settings(args)
    collection = settings.store.collection
    with closing(Store.open(settings.store)) as store:
        store.require(collection)
        for doc in sorted(store.documents(collection).values(), key=lambda d: d.file_path):
            line = f"{doc.chunks:5d} chunks  {doc.file_path or doc.doc_id}"
            print(line if doc.complete else f"{line}  {_incomplete(doc, collection)}")
    return 0


def _incomplete(doc: DocumentRecord, collection: str) -> str:
    """What `citeflow documents` says of a document of ``collection`` whose write was cut
    short, and the fix."""
    what = f"INCOMPLETE ({doc.stored} chunks stored, kept out of answers)"
    if not doc.file_path:
        return f"{what}: add the document again"
    option = "" if collection == "default" else f" --collection {collection}"
    return f"{what}: run `citeflow ingest {shlex.quote(doc.file_path)}{option}` again"


def cmd_collections(args: argparse.Namespace) -> int:
    from citeflow.store import Store

    with closing(Store.open(_settings(args).store)) as store:
        for name in store.collections():
            print(f"{name}\t{store.count(name)} chunks")
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    return asyncio.run(_ask(args))


async def _ask(args: argparse.Namespace) -> int:
    from citeflow.api.workflow_runs import stream_run
    from citeflow.terminal_stream import TerminalStream
    from citeflow.workflows.citation_query import CitationQueryWorkflow

    settings = _settings(args)
    question = " ".join(args.question).strip()
    if not question:
        raise CiteflowError('the question is empty; try: citeflow ask "What is ...?"')
    _announce(settings)
    workflow = CitationQueryWorkflow.from_settings(settings)
    run = stream_run(lambda: workflow.run(query=question), settings.server.cancel_timeout)
    async for output in TerminalStream(quiet=args.quiet, timings=args.timings).transform(run):
        output.write()
    workflow.retriever.store.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from citeflow.server import serve

    settings = _settings(args)
    _announce(settings)
    serve(settings, insecure_no_auth=args.insecure_no_auth)
    return 0


def cmd_models_install(args: argparse.Namespace) -> int:
    from citeflow.providers.models import install_default_model

    settings = load_settings()
    path = install_default_model(settings, progress=not args.quiet)
    print(f"default model ready: {path}")
    _runtime_hint()
    return 0


def cmd_models_path(args: argparse.Namespace) -> int:
    print(load_settings().local.gguf_path)
    return 0


def cmd_models_runtime(args: argparse.Namespace) -> int:
    from citeflow.providers import cpu_build

    flags = cpu_build.cpu_flags()
    if args.cmake_args:
        print(" ".join(cpu_build.cmake_args(flags)))
        return 0
    version, built = cpu_build.installed_runtime()
    if not args.needs_rebuild:
        print(f"llama.cpp (xllamacpp {version}) uses: {' '.join(sorted(built))}")
    rebuild = _print_rebuild_hint(flags, built)
    # --needs-rebuild, for `make model`: 0 when a rebuild would add instructions, else 1
    return 1 if args.needs_rebuild and not rebuild else 0


def _runtime_hint() -> None:
    """After a model install: say so when a rebuild of llama.cpp for this CPU would read prompts
    faster (nothing when the runtime is not installed)."""
    from citeflow.providers import cpu_build

    try:
        _, built = cpu_build.installed_runtime()
    except CiteflowError:
        return
    _print_rebuild_hint(cpu_build.cpu_flags(), built)


def _print_rebuild_hint(flags: frozenset[str], built: frozenset[str]) -> bool:
    """Print the one line saying what a rebuild for this CPU would add; whether it would."""
    from citeflow.providers import cpu_build

    hint = cpu_build.rebuild_hint(flags, built)
    if hint:
        print(hint)
    return hint is not None


# --- parser --------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="citeflow",
        description="Answers questions over your documents with numbered, verifiable citations.",
    )
    parser.add_argument("--log-level", default=os.environ.get("CITEFLOW_LOG_LEVEL", "WARNING"))
    parser.add_argument("--log-json", action="store_true", help="structured JSON logs on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    def collection_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("-c", "--collection", help="knowledge base name (CITEFLOW_COLLECTION)")

    p = sub.add_parser("ingest", help="add or update files and folders in a knowledge base")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument(
        "--prune", action="store_true", help="also remove documents whose files are gone"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    collection_arg(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("delete", help="remove documents from a knowledge base")
    p.add_argument("paths", nargs="*", type=Path)
    p.add_argument("--prune", action="store_true", help="remove documents whose files are gone")
    collection_arg(p)
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser(
        "reindex", help="add the keyword (BM25) index to a knowledge base made before it existed"
    )
    collection_arg(p)
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser(
        "migrate",
        help="move the embedded store of an earlier citeflow into the embedded engine "
        "(also done on first open) and index it",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser(
        "optimize",
        help="index for search what was added through the server's API (run with the server "
        "stopped; citeflow ingest does it itself)",
    )
    collection_arg(p)
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("documents", help="list the documents of a knowledge base")
    collection_arg(p)
    p.set_defaults(func=cmd_documents)

    p = sub.add_parser("collections", help="list knowledge bases")
    p.set_defaults(func=cmd_collections)

    p = sub.add_parser("ask", help="ask a question; streams a cited answer")
    p.add_argument("question", nargs="+")
    p.add_argument("-q", "--quiet", action="store_true", help="no status lines")
    p.add_argument("--timings", action="store_true", help="print the time spent in each step")
    collection_arg(p)
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("serve", help="run the OpenAI-compatible chat server (Open WebUI)")
    p.add_argument("--host", help="address to listen on (CITEFLOW_HOST)")
    p.add_argument("--port", type=int, help="port to listen on (CITEFLOW_PORT)")
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve without API keys on a non-loopback address (anyone who can reach it can "
        "read, upload and delete documents)",
    )
    p.set_defaults(func=cmd_serve)

    models = sub.add_parser("models", help="local model files").add_subparsers(
        dest="models_command", required=True
    )
    p = models.add_parser("install", help="assemble and verify the default local GGUF")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_models_install)
    p = models.add_parser("path", help="print the GGUF path in use")
    p.set_defaults(func=cmd_models_path)
    p = models.add_parser(
        "runtime", help="the CPU instructions llama.cpp uses, and whether a rebuild would add any"
    )
    p.add_argument(
        "--cmake-args", action="store_true", help="print llama.cpp's build options for this CPU"
    )
    p.add_argument(
        "--needs-rebuild",
        action="store_true",
        help="exit 0 when a rebuild for this CPU would add instructions the runtime lacks, else 1",
    )
    p.set_defaults(func=cmd_models_runtime)

    from citeflow.evaluation.cli import add_arguments as eval_arguments
    from citeflow.evaluation.cli import run as cmd_eval

    p = sub.add_parser(
        "eval", help="score retrieval (nDCG, Recall, MRR) and citations on a BEIR-format dataset"
    )
    eval_arguments(p)
    p.set_defaults(func=cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from citeflow import logs

    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level, json_format=args.log_json)
    try:
        code: int = args.func(args)
        return code
    except CiteflowError as exc:
        _say(f"citeflow: error: {exc}")
        return 1
    except KeyboardInterrupt:
        _say("citeflow: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
