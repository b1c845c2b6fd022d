"""citeflow's workflows."""

from citeflow.workflows.citation_query import CitationQueryWorkflow

__all__ = ["CitationQueryWorkflow"]
