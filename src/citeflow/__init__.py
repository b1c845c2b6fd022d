"""citeflow: answers questions over your documents with numbered, verifiable citations."""

from citeflow.errors import CiteflowError
from citeflow.knowledge_base import KnowledgeBase
from citeflow.result import CitedResponse
from citeflow.settings import Settings, load_settings
from citeflow.workflows.citation_query import CitationQueryWorkflow

__all__ = [
    "CitationQueryWorkflow",
    "CitedResponse",
    "CiteflowError",
    "KnowledgeBase",
    "Settings",
    "load_settings",
]
__version__ = "0.1.0"
