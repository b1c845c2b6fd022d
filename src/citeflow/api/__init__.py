"""citeflow's HTTP API: an OpenAI-compatible chat server with citations for Open WebUI.

| module | concept |
| --- | --- |
| `schemas` | the pydantic models of the OpenAI chat API subset (requests, responses, payloads) |
| `errors` | the one mapping of errors to OpenAI error bodies and HTTP statuses |
| `body` | a request's JSON body: parsed, nested at most 64 deep, valid Unicode (else HTTP 400) |
| `uploads` | uploaded files streamed to disk within the limits, nothing left of a refused one |
| `chat_stream` | `ChatStream`: workflow events as OpenAI chunks with Open WebUI events |
| `source_events` | a cited `Source` as a source payload, a `url_citation`, a document URL |
| `sse` | SSE framing: ready chunks batched into one write, keep-alives, ``[DONE]`` |
| `engine` | `Engine`: store, embedder and LLM built once; one workflow per collection |
| `workflow_runs` | a run streamed or awaited, and cancelled when its caller goes away |
| `webui_tasks` | Open WebUI's tasks (title, tags, follow-ups) answered by the LLM alone |
| `limits` | `ChatLimits`: chat completions in progress and per client per minute (HTTP 429) |
| `links` | `DocumentLinks`: signed, expiring source links a browser can open without the key |
| `throttle` | `FailedKeys`: wrong API keys per client address; past a limit, HTTP 429 |
| `deps` | FastAPI dependencies: the engine, limits, links, bearer-key auth |
| `exposure` | what may be served where: no keys on a non-loopback host refused; docs on or off |
| `docs` | the OpenAPI schema (bearer scheme, request bodies) and ``/docs``, ``/redoc`` |
| `routes` | the endpoints: health, models, chat completions |
| `users` | the Open WebUI user a request is for (forwarded headers, signed token checked) |
| `metrics` | `Metrics`: Prometheus series, their middleware and ``GET /metrics`` |
| `documents` | the endpoints of documents: upload, list, delete, original files |
| `search` | ``POST /search``: graded chunks for Open WebUI deployments with external retrieval |
| `skills` | Azure AI Search's Custom Web API skill and vectorizer over the engine's embedder |
| `skill_format` | the skill's envelope: records read and checked one by one, answers rendered |
| `skill_embedding` | a skill call's texts embedded in batches, each vector rendered as it exists |

`citeflow.server` assembles them: ``create_app(engine)`` and ``serve(settings)``.
"""
