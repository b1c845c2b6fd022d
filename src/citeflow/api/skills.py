"""Azure AI Search integrated vectorisation: a Custom Web API skill and vectorizer over citeflow.

| route | auth | what |
| --- | --- | --- |
| ``POST /v1/skills/embeddings`` | yes | the skill: an indexer's records embedded as documents |
| ``POST /v1/skills/embeddings?input_type=query`` | yes | the vectorizer: a query, as a question |

Both speak Azure's Custom Web API envelope (`citeflow.api.skill_format`); the vectorizer sends
one record per call, at query time, embedded as citeflow's retrieval embeds a question.
The embedder is the engine's, the one ingestion and retrieval use: the local model, OpenAI, or
Azure OpenAI (through API Management with its headers, `citeflow.providers.embeddings`), used
as `citeflow.api.skill_embedding` describes.

A bad record (no ``recordId`` or ``data``, a ``text`` missing, empty, too long or not valid
Unicode, or refused by the provider) gets ``"data": {}`` and its ``errors``; the others are
embedded. The whole call is refused (`citeflow.api.errors`) when the body is no JSON object with
a ``values`` list (400) or too large (413), and when the provider fails: its HTTP 429 is passed
on as 429 with ``Retry-After``, any other failure is a 502 (Azure's indexer retries both).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from citeflow.api.deps import EngineDep, require_api_key
from citeflow.api.docs import json_body
from citeflow.api.errors import PayloadTooLargeError
from citeflow.api.routes import read_json, unless_disconnected
from citeflow.api.schemas import error_responses
from citeflow.api.skill_embedding import InputType, embed_call
from citeflow.api.skill_format import SkillAnswer, SkillRequest, SkillResponse, read_records

ERRORS = error_responses(400, 401, 413, 429, 500, 502, 503)

router = APIRouter(
    prefix="/v1", tags=["skills"], dependencies=[Depends(require_api_key)], responses=ERRORS
)


@router.post(
    "/skills/embeddings",
    response_model=SkillResponse,
    # documentation only: the body is read and checked record by record below
    openapi_extra=json_body(SkillRequest),
)
async def skill_embeddings(
    request: Request, engine: EngineDep, input_type: InputType = "document"
) -> Response:
    """Azure AI Search's Custom Web API skill and vectorizer: each record's ``data.text``
    embedded with the server's embedder, answered as ``data.vector`` in the same order.

    ``input_type=query`` embeds the texts as questions (for the vectorizer, which sends one
    record per query). A bad record gets ``"data": {}`` and ``errors`` while the others are
    embedded; over 1,000 records is HTTP 413; the provider's rate limit is HTTP 429 with
    ``Retry-After``.
    """
    options = engine.settings.server
    try:
        body = await read_json(request, options.max_skill_body_bytes, check_strings=False)
    except PayloadTooLargeError as exc:
        raise PayloadTooLargeError(f"{exc.message}; lower the skill's batchSize") from None
    records = read_records(body, options)
    parts = await unless_disconnected(request, embed_call(records, engine.embed_model, input_type))
    if parts is None:
        return Response(status_code=499)
    return SkillAnswer(parts)
