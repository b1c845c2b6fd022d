"""The OpenAI chat API subset citeflow speaks: request and response models, Open WebUI payloads;
the documents' and ``POST /search``'s models.

Requests accept and ignore what citeflow does not use (``tools``, ``tool_choice``,
``temperature``, ...): Open WebUI sends some thirty tool definitions with every chat. Interpreting
a request (which message is the question, which ones are history) is `Conversation.from_messages`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from llama_index.core.llms import ChatMessage as LlamaChatMessage
from llama_index.core.llms import MessageRole
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict as ExtTypedDict  # pydantic needs it before Python 3.12

from citeflow.api.errors import BadRequestError, PayloadTooLargeError
from citeflow.citations.markers import strip_markers

#: Message roles citeflow accepts; ``tool``/``function`` turns are accepted and left out.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")

#: Open WebUI's title / tag / follow-up requests start with this.
TASK_PREFIX = "### Task:"


# --- requests ------------------------------------------------------------------------------------
class ChatMessageIn(BaseModel):
    """One message of a request; ``content`` is a string or a list of content parts."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message's text (text parts joined; images and other parts ignored)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = [
            str(part.get("text") or "")
            for part in self.content
            if part.get("type") in ("text", "input_text")
        ]
        return "\n".join(p for p in parts if p)


class StreamOptions(BaseModel):
    """``stream_options``: only ``include_usage`` matters."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class CiteflowRequestOptions(BaseModel):
    """citeflow's own request field: ``"citeflow": {"source_list": true}``."""

    model_config = ConfigDict(extra="forbid")

    source_list: bool | None = Field(
        default=None, description="Append a Markdown list of the cited sources to the answer."
    )


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``; unknown fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn]
    stream: bool = False
    stream_options: StreamOptions | None = None
    citeflow: CiteflowRequestOptions | None = None


@dataclass(frozen=True)
class Conversation:
    """A request read as citeflow needs it.

    ``query`` is the last user message; ``history`` the earlier user and assistant turns (with
    citation markers removed from the answers); ``task`` is set for Open WebUI's
    ``### Task:`` requests, which go to the LLM directly (``task_messages``).
    """

    query: str
    history: list[LlamaChatMessage] = field(default_factory=list)
    task: bool = False
    task_messages: list[LlamaChatMessage] = field(default_factory=list)
    prompt_text: str = ""

    @classmethod
    def from_messages(cls, messages: Sequence[ChatMessageIn], *, max_chars: int) -> Conversation:
        """Validate a request's messages (a chat completion's, or ``POST /search``'s) and split
        them into question and history.

        Raises:
            BadRequestError: no messages, an unknown role, or a last message that is not a
                non-empty user message (HTTP 400).
            PayloadTooLargeError: a message longer than ``max_chars`` (HTTP 413).
        """
        if not messages:
            raise BadRequestError(
                "'messages' is empty; send at least one user message", param="messages"
            )
        texts: list[str] = []
        for index, message in enumerate(messages):
            if message.role not in ROLES:
                raise BadRequestError(
                    f"messages[{index}].role {message.role!r} is not one of: {', '.join(ROLES)}",
                    param=f"messages[{index}].role",
                )
            text = message.text()
            if len(text) > max_chars:
                raise PayloadTooLargeError(
                    f"messages[{index}] has {len(text)} characters; the limit is {max_chars}",
                    param=f"messages[{index}].content",
                )
            texts.append(text)
        last = len(messages) - 1
        if messages[last].role != "user":
            raise BadRequestError(
                f"the last message must come from the user, not {messages[last].role!r}",
                param=f"messages[{last}].role",
            )
        query = texts[last].strip()
        if not query:
            raise BadRequestError(
                "the last user message is empty", param=f"messages[{last}].content"
            )
        prompt_text = "\n".join(texts)
        turns = [(m.role, t) for m, t in zip(messages, texts, strict=True)]
        conversational = [(r, t) for r, t in turns if r in ("user", "assistant")]
        if len(conversational) == 1 and query.startswith(TASK_PREFIX):
            task_messages = [
                LlamaChatMessage(role=_llama_role(role), content=text)
                for role, text in turns
                if role in ("system", "developer", "user")
            ]
            return cls(query, task=True, task_messages=task_messages, prompt_text=prompt_text)
        history = [
            LlamaChatMessage(
                role=_llama_role(role),
                content=strip_markers(text).strip() if role == "assistant" else text.strip(),
            )
            for role, text in conversational[:-1]
            if text.strip()
        ]
        return cls(query, history=history, prompt_text=prompt_text)


def _llama_role(role: str) -> MessageRole:
    if role == "assistant":
        return MessageRole.ASSISTANT
    if role in ("system", "developer"):
        return MessageRole.SYSTEM
    return MessageRole.USER


# --- responses -----------------------------------------------------------------------------------
class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``: a knowledge base."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "citeflow"
    name: str = Field(default="", description="A readable name (Open WebUI shows it).")


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class Usage(BaseModel):
    """Token counts, estimated with `citeflow.citations.text.count_tokens`."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: ResponseMessage
    finish_reason: Literal["stop", "length"] = "stop"


class ChatCompletion(BaseModel):
    """A non-streaming answer; ``sources`` holds the cited sources (Open WebUI's shape)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    sources: list[dict[str, Any]] | None = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A router's ``responses``: the OpenAPI schema's error body for each of ``statuses``."""
    return {status: {"model": ErrorResponse} for status in statuses}


class DocumentInfo(BaseModel):
    """One document of a knowledge base."""

    doc_id: str
    file_name: str
    file_path: str = Field(
        description="The file's path relative to the folder of the collection's files (an "
        "upload: its name; never a server path); empty for a document with no file."
    )
    title: str
    chunks: int = Field(description="Chunks stored.")
    expected_chunks: int | None = Field(
        default=None,
        description="Chunks the document has when complete (null: not recorded, for documents "
        "ingested by older versions).",
    )
    complete: bool = Field(
        default=True,
        description="False while, or after, a write of the document was cut short (a crash, a "
        "full disk): its chunks are kept out of answers until it is ingested again.",
    )
    problem: str | None = Field(
        default=None,
        description="For an incomplete document: what is wrong and how to repair it (one line).",
    )


class DocumentList(BaseModel):
    object: Literal["list"] = "list"
    collection: str
    data: list[DocumentInfo]


# --- POST /search --------------------------------------------------------------------------------
#: ``k``: results per query, by default and at most
SEARCH_K = 5
MAX_SEARCH_K = 50
#: most search strings, and knowledge bases, one search may name
MAX_SEARCH_QUERIES = 20
MAX_SEARCH_COLLECTIONS = 20


class SearchRequest(BaseModel):
    """``POST /search``: the retrieval contract of Open WebUI deployments that send retrieval to
    a separate service. ``queries`` or ``messages``; with ``messages``, the query is made from
    the conversation and ``queries`` is ignored. Other fields (e.g.
    ``retrieval_query_generation_prompt_template``) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    queries: list[str] | None = Field(
        default=None,
        max_length=MAX_SEARCH_QUERIES,
        description="Search strings; the answer holds one list of results per string.",
    )
    messages: list[ChatMessageIn] | None = Field(
        default=None,
        description="A chat (OpenAI messages): its last user message, made standalone from "
        "the earlier turns as a chat completion's is, is the one query.",
    )
    collection_names: list[str] | None = Field(
        default=None,
        max_length=MAX_SEARCH_COLLECTIONS,
        description="Knowledge bases to search (names, or model ids citeflow-<name>); left "
        "out: the server's default one.",
    )
    k: int = Field(
        default=SEARCH_K,
        ge=1,
        le=MAX_SEARCH_K,
        strict=True,
        description="Results per query, at most.",
    )


class SearchMetadata(ExtTypedDict, total=False):
    """What a result's citation needs; nothing a chat completion's sources do not show."""

    source: str
    name: str
    doc_id: str
    file_name: str
    collection: str
    page: int
    chunk_index: int
    url: str


class SearchResponse(BaseModel):
    """The results of a search, one list per query, best first (parallel lists)."""

    documents: list[list[str]] = Field(description="The chunks' texts.")
    metadatas: list[list[SearchMetadata]] = Field(
        description="Per chunk: ``source`` (its document's id, Open WebUI's grouping key), "
        "``name`` (file name, and page), ``doc_id``, ``file_name``, ``collection``, ``page`` "
        "(0-based, when the document has pages), ``chunk_index`` and ``url`` (the original, or "
        "its document's link on this server, signed when the server has keys)."
    )
    distances: list[list[float]] = Field(
        description="Relevance in [0, 1], higher is better: the query's cosine similarity "
        "with the chunk, as a chat completion's sources show it."
    )


# --- Open WebUI event payloads (streamed by `citeflow.api.chat_stream`) -------------------
class SourceRef(TypedDict, total=False):
    id: str
    name: str
    url: str


class SourceMetadata(TypedDict, total=False):
    source: str
    name: str
    page: int
    doc_id: str
    file_name: str


class SourceData(TypedDict):
    """``event.data`` of a ``source`` event; one per cited number."""

    source: SourceRef
    document: list[str]
    metadata: list[SourceMetadata]
    distances: list[float]
