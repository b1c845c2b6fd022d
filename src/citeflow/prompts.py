"""Every prompt citeflow sends, as named templates.

`CITATION_QA_TEMPLATE` and `CITATION_REFINE_TEMPLATE` play the roles of LlamaIndex's
`CitationQueryEngine` templates (same variables: ``context_str``, ``query_str``,
``existing_answer``), rewritten so that small local models cite too: a short system rule, the
numbered sources first, one worked example, and the question last, close to where the answer
starts. Sources reach the model as ``[N] text`` blocks produced by `format_sources`.
"""

from __future__ import annotations

from llama_index.core.prompts import PromptTemplate

CITATION_SYSTEM_PROMPT = (
    "You answer questions using only the numbered sources you are given. "
    "After every sentence that uses a source, write that source's number in square brackets, "
    "like [1] or [2][3]. Use only numbers of the sources shown. "
    "If the sources do not contain the answer, say that the documents do not cover it."
)

#: the worked example's two sources and its answer's second sentence; a small model now and then
#: copies them into its answer, where the citation check leaves them out
EXAMPLE_SENTENCES = (
    "The sky is red in the evening and blue in the morning.",
    "Water is wet when the sky is red.",
    "That happens in the evening.",
)

# the parts the markers and the JSON templates share: the worked example's sources and
# question, the sources and question asked, and the refine prompt's answer so far
_EXAMPLE = (
    "Example:\n"
    f"[1] {EXAMPLE_SENTENCES[0]}\n"
    f"[2] {EXAMPLE_SENTENCES[1]}\n"
    "Question: When is water wet?\n"
)
_SOURCES_AND_QUESTION = "Sources:\n{context_str}\n\nQuestion: {query_str}\n"
_EXISTING_AND_MORE = (
    "Existing answer (its [N] numbers refer to earlier sources and stay valid):\n"
    "{existing_answer}\n"
    "\n"
    "More sources:\n"
    "{context_str}\n"
    "\n"
    "Question: {query_str}\n"
)

CITATION_QA_TEMPLATE = PromptTemplate(
    _EXAMPLE
    + f"Answer: {EXAMPLE_SENTENCES[1][:-1]} [2]. {EXAMPLE_SENTENCES[2][:-1]} [1].\n\n"
    + _SOURCES_AND_QUESTION
    + "Answer in a few sentences, each ending with its source number in brackets."
)

CITATION_REFINE_TEMPLATE = PromptTemplate(
    _EXISTING_AND_MORE
    + "Rewrite the answer using the new sources where they help, keeping every sentence's "
    "source numbers in brackets. If they do not help, repeat the existing answer."
)

CITATION_JSON_SYSTEM_PROMPT = (
    "You answer questions using only the numbered sources you are given. Reply in JSON: the "
    "answer's sentences, each with the numbers of the sources it is taken from, then its text. "
    "Use only numbers of the sources shown. If the sources do not contain the answer, reply "
    "with one sentence saying that the documents do not cover it, with no sources."
)

CITATION_JSON_QA_TEMPLATE = PromptTemplate(
    _EXAMPLE + f'Answer: {{"sentences": [{{"sources": [2], "text": "{EXAMPLE_SENTENCES[1]}"}}, '
    f'{{"sources": [1], "text": "{EXAMPLE_SENTENCES[2]}"}}]}}\n\n'
    + _SOURCES_AND_QUESTION
    + "Answer in a few sentences, each with the numbers of the sources it is taken from."
)

CITATION_JSON_REFINE_TEMPLATE = PromptTemplate(
    _EXISTING_AND_MORE
    + "Rewrite the answer using the new sources where they help, each sentence with the numbers "
    "of the sources it is taken from. If they do not help, repeat the existing answer."
)

REWRITE_PROMPT = PromptTemplate(
    "Rewrite the last question of this conversation as one standalone search query that can be "
    "understood without the conversation. Reply with the query only.\n"
    "\n"
    "Conversation:\n"
    "{history_str}\n"
    "\n"
    "Last question: {query_str}\n"
    "Standalone query:"
)

RETRY_KEYWORDS_PROMPT = PromptTemplate(
    "A document search for the question below found nothing relevant. Write a different search "
    "query: 3 to 8 keywords and synonyms a document answering it would contain. "
    "Reply with the keywords only.\n"
    "Question: {query_str}\n"
    "Failed query: {failed_query}\n"
    "Keywords:"
)

RETRY_HYPOTHETICAL_PROMPT = PromptTemplate(
    "Write two sentences that a document answering this question might contain. "
    "Reply with the two sentences only.\n"
    "Question: {query_str}\n"
    "Sentences:"
)

GRADE_PROMPT = PromptTemplate(
    "Which passages help answer the question? Reply with JSON only, of the form "
    '{"relevant": [numbers]}, listing the numbers of the helpful passages; '
    '{"relevant": []} when none helps.\n'
    "\n"
    "Question: {query_str}\n"
    "\n"
    "Passages:\n"
    "{passages_str}\n"
    "\n"
    "JSON:"
)

CITATION_JUDGE_SYSTEM_PROMPT = (
    "You check whether a passage supports a statement. Answer only Yes or No."
)

CITATION_JUDGE_PROMPT = PromptTemplate(
    "Passage: {quote}\n"
    "Statement: {statement}\n"
    "Does the passage support the statement? Answer Yes or No."
)

NOT_COVERED_ANSWER = "The documents do not cover this question."
