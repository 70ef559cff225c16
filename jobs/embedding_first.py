"""The hybrid pool's order before packing: the embedding list's best few come first (`selection.embedding_first`).

Min-max fusion gives a chunk that only one list ranked at most half the score of one both lists ranked. A
paraphrased question shares no word with the sentence that answers it, so bm25 does not rank that chunk and
the embedding's few best can sit below what the token budget packs (BENCHMARKS.md,
"Answer in the prompt (selection)"). So the fused top ``n`` and the embedding list's top ``n`` are packed first,
in fused order, then the rest in fused order: deterministic, no extra call or token, and each moved candidate
says why (``first_by``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from jobs.select import Candidate


def embedding_first(candidates: Sequence[Candidate], n: int) -> list[Candidate]:
    """``candidates`` (fused order) with the embedding list's top ``n`` (by cosine; ties by URL and position)
    moved up among the fused top ``n``; those moved carry ``first_by`` ("embedding #k")."""
    if n <= 0:
        return list(candidates)
    by_cosine = sorted((c for c in candidates if c.embedding_score is not None),
                       key=lambda c: (-(c.embedding_score or 0.0), c.url, c.ordinal))
    best = {c.chunk_id: k for k, c in enumerate(by_cosine[:n], start=1)}
    head = {c.chunk_id for c in candidates[:n]}
    first: list[Candidate] = []
    rest: list[Candidate] = []
    for candidate in candidates:
        if candidate.chunk_id in head:
            first.append(candidate)
        elif candidate.chunk_id in best:
            first.append(replace(candidate, first_by=f"embedding #{best[candidate.chunk_id]}"))
        else:
            rest.append(candidate)
    return first + rest
