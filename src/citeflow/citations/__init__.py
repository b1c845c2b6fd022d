"""Citations: numbered source chunks, [N] markers, support checks and answer repair."""
