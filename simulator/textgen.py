"""Synthetic tokens and text: what the simulated model "says", deterministic per seed.

The simulator has no tokenizer and no model. Output tokens come from a small fixed vocabulary of word
pieces; token ``i`` of the vocabulary always decodes to the same piece, so ``output_ids`` and ``text`` stay
consistent. A few pieces are U+2028 (LINE SEPARATOR) and U+0085 (NEXT LINE): real servers emit such
characters (the 0.5.17 capture does), and a client that splits SSE on them (``str.splitlines``) breaks,
so the simulator makes clients meet them.

Prompt length: the length of ``input_ids`` when given, otherwise an estimate from the text,
``ceil(len(text) / CHARS_PER_TOKEN)`` with at least one token (English BPE averages ~4 characters/token).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence

CHARS_PER_TOKEN = 4.0
# One in this many tokens is one of the "awkward" line-breaking characters.
AWKWARD_EVERY = 97

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "been",
    "one",
    "all",
    "we",
    "their",
    "has",
    "would",
    "when",
    "if",
    "so",
    "no",
    "will",
    "more",
    "can",
    "its",
    "about",
    "what",
    "up",
    "out",
    "them",
    "into",
    "only",
    "some",
    "time",
    "could",
    "these",
    "two",
    "may",
    "first",
    "then",
    "do",
    "any",
    "like",
    "my",
    "now",
    "over",
    "such",
    "our",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "speculative",
    "decoding",
    "draft",
    "verify",
    "token",
    "batch",
]

# Vocabulary: " word" pieces, a few punctuation pieces, and the awkward characters.
VOCAB: tuple[str, ...] = (
    *(f" {w}" for w in _WORDS),
    ".",
    ",",
    "\n",
    "\u2028",
    "\u0085",
)
_AWKWARD_IDS = (VOCAB.index("\u2028"), VOCAB.index("\u0085"))
_PLAIN_IDS = len(VOCAB) - 2
# Token ids are offset so they look like a real vocabulary's (not 0..N).
TOKEN_ID_OFFSET = 1000
# Pieces already JSON-escaped (without quotes): streaming builds cumulative JSON strings by appending.
_ESCAPED: tuple[str, ...] = tuple(json.dumps(p, ensure_ascii=False)[1:-1] for p in VOCAB)
_ESCAPED_BYTES: tuple[bytes, ...] = tuple(p.encode() for p in _ESCAPED)


def estimate_prompt_tokens(text: str) -> int:
    """Deterministic token-count estimate of a prompt text (see the module docstring)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def prompt_tokens_of(text: str | None, input_ids: Sequence[int] | None) -> int:
    if input_ids is not None:
        return max(1, len(input_ids))
    return estimate_prompt_tokens(text or "")


class TokenStream:
    """The tokens one request generates, reproducible from (seed, request index)."""

    __slots__ = ("_rng",)

    def __init__(self, seed: int, index: int) -> None:
        self._rng = random.Random(seed * 1_000_003 + index)

    def next_index(self) -> int:
        rng = self._rng
        if rng.randrange(AWKWARD_EVERY) == 0:
            return _AWKWARD_IDS[rng.randrange(2)]
        return rng.randrange(_PLAIN_IDS)


def token_id(index: int) -> int:
    return TOKEN_ID_OFFSET + index


def piece(index: int) -> str:
    return VOCAB[index]


def escaped_piece(index: int) -> str:
    return _ESCAPED[index]


def escaped_piece_bytes(index: int) -> bytes:
    return _ESCAPED_BYTES[index]
