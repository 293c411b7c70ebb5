"""Seeded local prompts: nothing is downloaded.

``generate`` gets random token ids (like SGLang's ``random-ids`` dataset); the OpenAI API gets random text
made of short common words (about one token each in the usual BPE vocabularies; the server reports the real
prompt token count, which is what the statistics use).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_SEED = 1
DEFAULT_VOCAB_SIZE = 1000  # ids below this exist in every tokenizer; 0-9 are avoided (often special)
_MIN_TOKEN_ID = 10
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "you",
    "that",
    "he",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said",
    "there",
    "use",
    "an",
    "each",
    "which",
    "she",
    "do",
    "how",
    "their",
    "if",
    "will",
    "up",
    "other",
    "about",
    "out",
    "many",
    "then",
    "them",
    "these",
    "so",
    "some",
    "her",
    "would",
    "make",
    "like",
    "him",
    "into",
    "time",
    "has",
    "look",
    "two",
    "more",
    "write",
    "go",
    "see",
    "number",
    "no",
    "way",
    "could",
    "people",
    "my",
    "than",
    "first",
    "water",
    "been",
    "call",
    "who",
    "oil",
    "its",
    "now",
    "find",
    "long",
    "down",
    "day",
    "did",
    "get",
    "come",
    "made",
    "may",
    "part",
]


@dataclass(frozen=True)
class Prompt:
    index: int
    input_ids: list[int] | None
    text: str | None
    input_len: int  # requested length (tokens for ids, words for text)


class PromptFactory:
    """Prompt ``i`` is a pure function of (seed, i), so two runs with one seed send the same prompts."""

    def __init__(
        self, input_len: int, as_text: bool, seed: int = DEFAULT_SEED, vocab_size: int = DEFAULT_VOCAB_SIZE
    ) -> None:
        if input_len < 1:
            raise ValueError(f"input_len must be >= 1, got {input_len}")
        self.input_len = input_len
        self.as_text = as_text
        self.seed = seed
        self.vocab_size = vocab_size

    def __call__(self, index: int, input_len: int | None = None) -> Prompt:
        """Prompt ``index``, ``input_len`` long (default the factory's: a replay gives each its own)."""
        length = self.input_len if input_len is None else input_len
        if length < 1:
            raise ValueError(f"input_len must be >= 1, got {length}")
        rng = random.Random(self.seed * 1_000_003 + index)
        if self.as_text:
            text = " ".join(rng.choice(_WORDS) for _ in range(length))
            return Prompt(index=index, input_ids=None, text=text, input_len=length)
        ids = [rng.randrange(_MIN_TOKEN_ID, self.vocab_size) for _ in range(length)]
        return Prompt(index=index, input_ids=ids, text=None, input_len=length)
