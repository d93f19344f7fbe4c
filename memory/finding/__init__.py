"""Finding: hybrid search over a person's memory (keyword and vector candidates, fused) and the
semantic cache that reuses a near-identical search.
"""
