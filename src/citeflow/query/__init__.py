"""The parts the query workflow's steps call: retrieval, grading, rewriting, synthesis."""
