"""Analyse: regression verdicts (compare) and acceptance checks (accept)."""
