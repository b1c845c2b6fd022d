"""citeflow's workflows."""

from citeflow.workflows.citation_query import CitationQueryWorkflow, QueryOptions

__all__ = ["CitationQueryWorkflow", "QueryOptions"]
