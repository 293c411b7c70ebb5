"""Prometheus text exposition → flat samples of the families asked for, with one clear error for a body
that is not Prometheus text.

This is spectower's one parser of the text format (0.0.4). It reads only the lines of the families a
caller asks for, found by one regular expression over the whole body, so the ~500 lines of a SGLang
scrape that spectower does not store cost nothing in Python, and parses each kept line with regular
expressions instead of a character loop. What it returns is what prometheus_client's parser returns for
the same lines, family and type included (a sample whose name its TYPE line does not allow is a family of
its own; a counter's family drops ``_total``): tests/test_promtext.py compares the two on real scrapes
and on variations of them. Where the format is loose it is stricter: a kept line that is not
``name{label="value",...} value [timestamp]`` (blanks or tabs between tokens), or a TYPE line it cannot
read, refuses the whole body (``MetricsParseError``: nothing of it is used). Values that are not finite
are dropped (SGLang exports ``NaN`` for idle gauges such as ``fwd_occupancy``), and a size cap keeps a
runaway body out.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Generic, NamedTuple, TypeVar

# A real 0.5.17 scrape is ~70 KB; an 8-rank server with all schedulers reporting stays well under this.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


class MetricsParseError(ValueError):
    """The body is not Prometheus text (or was cut off)."""


class PromSample(NamedTuple):
    """One sample (a named tuple: a few hundred are made per scrape, and a tuple is the cheapest to make)."""

    name: str  # the sample name (with _bucket/_sum/_count/_total suffixes as exposed)
    family: str  # the family it belongs to
    type: str  # counter | gauge | histogram | summary | unknown | ...
    labels: Mapping[str, str]  # shared between samples of the same series: read-only
    value: float


T = TypeVar("T")


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_LABEL_VALUE = r'(?:[^"\\]|\\.)*'  # escapes: \\, \" and \n (any other backslash pair is kept as is)
_LABEL_RE = re.compile(rf'({_LABEL_NAME})[ \t]*=[ \t]*"({_LABEL_VALUE})"')
_LABEL = rf'{_LABEL_NAME}[ \t]*=[ \t]*"{_LABEL_VALUE}"'
# the whole inside of {...}: labels separated by commas, one trailing comma allowed, blanks around tokens
_LABELS_RE = re.compile(rf"[ \t]*(?:{_LABEL}(?:[ \t]*,[ \t]*{_LABEL})*[ \t]*,?)?[ \t]*")
# Go's float syntax as exporters write it (and Python's float() reads it the same): no hex, no "_",
# no other spellings of infinity.
_VALUE = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN"
# a sample line is a head, ``name`` or ``name{labels}``, then a tail: value and an optional timestamp (ms)
_HEAD_RE = re.compile(rf"({_NAME})\{{(.*)\}}")
_TAIL_RE = re.compile(rf"[ \t]+({_VALUE})(?:[ \t]+-?[0-9]+)?")
_NO_LABELS: Mapping[str, str] = MappingProxyType({})
# heads read so far -> (name, labels): a scrape repeats the same series (16 servers + GPUs: a few thousand)
_HEADS: dict[str, tuple[str, Mapping[str, str]]] = {}
_MAX_HEADS = 20_000  # ~7x 16 servers + their GPUs; past it (~25 MB at most) the cache starts over
# whole sample lines read so far -> (name, labels, value): a histogram's buckets, a quiet gauge, a counter
# that did not move repeat the very same line at the next scrape (about half a SGLang scrape's kept
# lines), which then costs one dict lookup. A line whose value moved is a new key: the cache starts over
# when full, and the stable lines are back after one scrape.
_LINES: dict[str, tuple[str, Mapping[str, str], float]] = {}
_MAX_LINES = 20_000  # a few seconds of 16 servers' changing lines; ~6 MB at most
_NAME_RE = re.compile(_NAME)
_ESCAPE_RE = re.compile(r'\\[\\n"]')
_UNESCAPED = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
# a comment's tokens are split on ASCII whitespace only, as prometheus_client splits them
_COMMENT_SPLIT_RE = re.compile(r"[ \t\n\r\x0b\x0c]+")


class PerLabelSet(Generic[T]):
    """What a reader works out from a sample's labels (its GPU, its rank), kept per label set: this parser
    hands out the same read-only mapping for a series at every scrape (``_HEADS``), so ``derive`` runs
    once per series, not once per sample per scrape. Keyed by the mapping's identity: an entry holds its
    mapping (so that id is not reused while held) and answers only for that very mapping; label sets made
    afresh each time (the Prometheus source's) are derived again and, past ``_MAX_HEADS``, start it over."""

    def __init__(self, derive: Callable[[Mapping[str, str]], T]) -> None:
        self._derive = derive
        self._known: dict[int, tuple[Mapping[str, str], T]] = {}

    def __call__(self, labels: Mapping[str, str]) -> T:
        known = self._known.get(id(labels))
        if known is not None and known[0] is labels:
            return known[1]
        value = self._derive(labels)
        if len(self._known) >= _MAX_HEADS:
            self._known.clear()
        self._known[id(labels)] = (labels, value)
        return value


# TYPE -> the sample names (family name + suffix) that belong to the family; any other is its own family
_SUFFIXES = {"summary": ("_count", "_sum", ""), "histogram": ("_count", "_sum", "_bucket")}
_TYPES = frozenset(
    {"counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info", "stateset"}
)


@functools.lru_cache(maxsize=32)
def _finder(families: frozenset[str]) -> re.Pattern[str]:
    """One expression that finds the lines of ``families``: a sample whose name (up to the first ``{`` or
    blank) is a family or a family plus one ``_suffix`` without another ``_``, and a ``# TYPE`` line (or a
    HELP line not written ``# HELP ...``) naming one. ``# HELP`` lines carry only documentation."""
    alternatives = _alternation(families)
    ws = r"[^\S\n]"  # whitespace within the line
    comment = rf"(?!\# HELP)\#\S*{ws}+(?:TYPE|HELP){ws}+(?:{alternatives})(?:_[^_\s]*)?(?=\s|$)"
    sample = rf"(?:{alternatives})(?:_[^_{{ \n]*)?(?=[{{ \n]|$)"
    # anchored on the "\n" before each line (not ^ with MULTILINE) so the engine skips from newline to newline
    return re.compile(rf"\n((?:{comment}|{sample})[^\n]*)")


_Trie = dict[str, "_Trie"]


def _alternation(words: Iterable[str]) -> str:
    """A pattern matching exactly ``words``, written as a trie: the regex engine tries alternatives one by
    one, so sharing their prefixes ("sglang:", "DCGM_FI_DEV_") makes each line cost one pass, not one per
    family."""
    trie: _Trie = {}  # a node: next character -> node; "" ends a word
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def pattern(node: _Trie) -> str:
        branches = [re.escape(ch) + pattern(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return pattern(trie)


def family_lines(text: str, families: frozenset[str]) -> list[str]:
    """The lines of ``families`` in ``text`` (their TYPE lines and samples), in order."""
    return _finder(families).findall("\n" + text) if families else []


def parse_prometheus_text(
    text: str, *, families: frozenset[str], max_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> list[PromSample]:
    """Every finite sample of ``families`` in ``text`` (a family name matches its samples ``name``,
    ``name_total``, ``name_bucket``...). Raises MetricsParseError naming the problem."""
    if len(text) > max_bytes:
        raise MetricsParseError(f"/metrics body is {len(text)} bytes, over the {max_bytes} byte limit")
    if text and not text.endswith("\n"):
        # The exposition format ends every line with LF; a body without the final one was cut off
        # mid-line (a truncated read), and its last sample may be silently wrong ("12" of "1234").
        raise MetricsParseError("/metrics body is truncated (does not end with a newline)")
    return _Families().read(family_lines(text, families))


class _Families:
    """Groups samples into families the way prometheus_client's text parser does: a TYPE (or HELP) line
    opens a family; a sample whose name the family's type allows joins it, any other sample is a family of
    its own (type unknown). A family's type is checked and its counter names settled when it closes."""

    def __init__(self) -> None:
        self.out: list[PromSample] = []
        self.name = ""
        self.type = "untyped"
        self.allowed: tuple[str, ...] = ()
        self.samples: list[tuple[str, Mapping[str, str], float]] = []

    def read(self, lines: Iterable[str]) -> list[PromSample]:
        for raw in lines:
            line = raw.strip()
            if not line:
                continue
            if line[0] == "#":
                self._comment(line)
                continue
            name, labels, value = _sample(line)
            if name in self.allowed:
                if math.isfinite(value):
                    self.samples.append((name, labels, value))
                continue
            self._close()
            self.name, self.type, self.allowed, self.samples = "", "untyped", (), []
            if math.isfinite(value):
                _emit(self.out, name, "untyped", [(name, labels, value)])
        self._close()
        return self.out

    def _comment(self, line: str) -> None:
        read = _read_comment(line)
        if read is None:
            return  # a comment
        kind, name, typ = read
        if kind == "HELP":
            if name != self.name:
                self._close()
                self.name, self.type, self.allowed, self.samples = name, "untyped", (name,), []
            return
        if name != self.name:
            self._close()
            self.name, self.samples = name, []
        self.type = typ
        self.allowed = tuple(name + s for s in _SUFFIXES.get(typ, ("",)))

    def _close(self) -> None:
        if self.name:
            _emit(self.out, self.name, self.type, self.samples)


@functools.lru_cache(maxsize=4096)
def _read_comment(line: str) -> tuple[str, str, str] | None:
    """(TYPE or HELP, metric name, type or "") of a TYPE/HELP line, None for another comment. The same
    lines come at every scrape: each is read once (a line refused is refused again: errors are not kept)."""
    parts = _COMMENT_SPLIT_RE.split(line, 3)
    if len(parts) < 2 or parts[1] not in ("TYPE", "HELP"):
        return None
    name = parts[2] if len(parts) > 2 else ""
    if '"' in name:
        raise _not_text("a quoted metric name", line)
    if len(parts) > 2 and not _NAME_RE.fullmatch(name):
        raise _not_text(f"a {parts[1]} line that names no metric", line)
    if parts[1] == "HELP":
        return "HELP", name, ""
    if len(parts) < 4:
        raise _not_text("a TYPE line without a type", line)
    return "TYPE", name, parts[3]


def _emit(
    out: list[PromSample], family: str, typ: str, samples: list[tuple[str, Mapping[str, str], float]]
) -> None:
    typ = "unknown" if typ == "untyped" else typ
    if typ not in _TYPES:
        raise MetricsParseError(
            f"/metrics body is not Prometheus text: {family}: {typ!r} is not a metric type"
        )
    rename = False
    if typ == "counter":  # OpenMetrics' naming, as prometheus_client reads it: family x, samples x_total
        if family.endswith("_total"):
            family = family[:-6]
        else:
            rename = True
    if not family:
        raise MetricsParseError("/metrics body is not Prometheus text: a counter family named _total")
    for name, labels, value in samples:
        out.append(PromSample(name + "_total" if rename else name, family, typ, labels, value))


def _sample(line: str) -> tuple[str, Mapping[str, str], float]:
    """(name, labels, value) of a sample line: ``name{labels} value [timestamp]``, read once per line text
    (``_LINES``; a line refused is refused again: errors are not kept)."""
    known = _LINES.get(line)
    if known is None:
        known = _read_sample(line)
        if len(_LINES) >= _MAX_LINES:
            _LINES.clear()
        _LINES[line] = known
    return known


def _read_sample(line: str) -> tuple[str, Mapping[str, str], float]:
    """``_sample`` of a line not seen lately. The ``name{labels}`` part is the same every scrape, so its
    reading is kept too (``_HEADS``); a label value may hold a ``}``, the value and timestamp cannot, so
    the part ends at the line's last ``}``."""
    cut = line.rfind("}") + 1
    if cut:
        head = line[:cut]
        known = _HEADS.get(head)
        if known is None:
            known = _read_head(head, line)
        name, labels = known
    else:
        m = _NAME_RE.match(line)
        if m is None:
            raise _not_text("no metric name", line)
        name, labels, cut = m.group(0), _NO_LABELS, m.end()
        if line.startswith("{", cut):
            raise _not_text("labels without a closing }", line)
    tail = _TAIL_RE.fullmatch(line, cut)
    if tail is None:
        raise _not_text("no value", line)
    value_text = tail.group(1)
    value = float(value_text)
    if value == 0.0 and value_text[0] == "-" and value_text[1:].isdigit():
        value = 0.0  # "-0" is the integer 0 (prometheus_client reads integers as int)
    return name, labels, value


def _read_head(head: str, line: str) -> tuple[str, Mapping[str, str]]:
    m = _HEAD_RE.fullmatch(head)
    if m is None:
        raise _not_text("not a sample line", line)
    labels_text = m.group(2)
    if not _LABELS_RE.fullmatch(labels_text):
        raise _not_text("bad labels", line)
    pairs = _LABEL_RE.findall(labels_text)
    labels = dict(pairs)
    if len(labels) != len(pairs):
        raise _not_text("a label given twice", line)
    if any(k.startswith("__") for k in labels):
        raise _not_text("a reserved label (__)", line)
    if "\\" in labels_text:
        labels = {k: _ESCAPE_RE.sub(_unescape, v) if "\\" in v else v for k, v in labels.items()}
    if len(_HEADS) >= _MAX_HEADS:  # series come and go (a restart's new pid label): start over
        _HEADS.clear()
    known = _HEADS[head] = (m.group(1), MappingProxyType(labels))
    return known


def _not_text(problem: str, line: str) -> MetricsParseError:
    return MetricsParseError(f"/metrics body is not Prometheus text: {problem}: {line[:120]!r}")


def _unescape(m: re.Match[str]) -> str:
    return _UNESCAPED[m.group(0)]
