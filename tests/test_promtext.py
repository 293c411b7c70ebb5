"""collectors/promtext.py: spectower's own text-format parser reads what prometheus_client's parser reads.

The reference (tests/promtext_reference.py) is what the collector ran before: the families' lines through
prometheus_client. Real scrapes, then variations of them that the format allows (order, whitespace,
escapes, value spellings, timestamps, types, comments), must give the same samples, family and type
included; garbled lines must be refused or read the same, never read differently.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectower.collectors import promtext
from spectower.collectors.gpu.dcgm import FAMILIES as DCGM_FAMILIES
from spectower.collectors.promtext import MetricsParseError, PromSample, parse_prometheus_text
from spectower.collectors.sglang.metrics import FAMILIES as SGLANG_FAMILIES
from spectower.simulator import dcgm
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine
from spectower.simulator.gpus import VirtualGpus
from spectower.simulator.profile import load_profile

from tests.conftest import REAL_DATA, examples
from tests.promtext_reference import reference_parse

SETTINGS = settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _dcgm_page() -> str:
    engine = Engine(SimConfig(profile=load_profile("glm5-nvfp4-8x-rtx-pro-6000")))
    return dcgm.render(VirtualGpus(engine, seed=1)).decode()


# (body, the families the collector reads from it)
CAPTURES: dict[str, tuple[str, frozenset[str]]] = {
    name: ((REAL_DATA / name).read_text(), SGLANG_FAMILIES)
    for name in (
        "sglang-0.5.17-h200/metrics_after.txt",
        "sglang-0.5.17-h200/metrics_idle.txt",
        "metrics/sglang_docs_production_metrics_example_llama31_8b.txt",
        "metrics/sglang_issue13485_v0.5.1_Qwen-32B_excerpt.txt",
    )
} | {"simulator dcgm-exporter page": (_dcgm_page(), DCGM_FAMILIES)}


def _same(text: str, families: frozenset[str]) -> list[PromSample]:
    """Both parsers' reading of ``text``; fails unless they agree."""
    ours = parse_prometheus_text(text, families=families)
    assert ours == reference_parse(text, families)
    return ours


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_a_real_scrape_reads_as_prometheus_client_reads_it(name: str) -> None:
    text, families = CAPTURES[name]
    samples = _same(text, families)
    assert samples, "the capture holds series the collector reads"
    assert {s.type for s in samples} <= {"gauge", "counter", "histogram", "unknown"}


# -- variations the format allows --------------------------------------------------------------------------
BLANKS = st.sampled_from([" ", "  ", "\t", " \t "])
VALUES = st.sampled_from(
    ["0", "-0", "-0.0", "1", "+7", "12.5", ".5", "5.", "1e3", "-2.5E-3", "00012", "NaN", "+Inf", "-Inf",
     "Inf", "123456789012345678901234567890", "1e400"]
)  # fmt: skip
LABEL_VALUES = st.sampled_from(
    ["", "x", 'say \\"hi\\"', "back\\\\slash", "new\\nline", "a}b", "{", "a,b=c", "ünï", "tab\there", "\\t"]
)


@st.composite
def sample_variant(draw: st.DrawFn, line: str) -> str:
    """``line`` (a sample) with its value, blanks, labels and timestamp varied within the format."""
    cut = line.rfind("}") + 1 or line.find(" ")
    head, rest = line[:cut], line[cut:]
    if "{" in head and draw(st.booleans()):
        name, _, inner = head[:-1].partition("{")
        pairs = [list(p) for p in promtext._LABEL_RE.findall(inner)]  # [name, value as written]
        if pairs and draw(st.booleans()):
            k = draw(st.integers(0, len(pairs) - 1))
            pairs[k][1] = draw(LABEL_VALUES)
        sep = draw(st.sampled_from([",", ", ", " ,", ",\t"]))
        around = draw(st.sampled_from(["", " "]))
        body = sep.join(f'{k}{around}={around}"{v}"' for k, v in pairs)
        trailing = draw(st.sampled_from(["", ","]))
        head = f"{name}{{{draw(st.sampled_from(['', ' ']))}{body}{trailing}}}"
    value = draw(VALUES) if draw(st.booleans()) else rest.split()[0]
    stamp = draw(st.sampled_from(["", " 1712345678901", "\t-5"]))
    end = draw(st.sampled_from(["", " ", "\r", "\t"]))
    return f"{head}{draw(BLANKS)}{value}{stamp}{end}"


EXTRA_LINES = st.sampled_from(
    ["", "# a comment", "#", "# HELP sglang:num_running_reqs The number",
     "# TYPE sglang:num_running_reqs gauge",
     "# TYPE sglang:num_running_reqs counter", "# TYPE sglang:prompt_tokens counter",
     "# TYPE sglang:num_queue_reqs untyped", "# TYPE sglang:e2e_request_latency_seconds summary",
     "#\tTYPE sglang:gen_throughput unknown", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
     "# TYPE DCGM_FI_DEV_GPU_UTIL info", "sglang:prompt_tokens 5", "sglang:num_running_reqs_extra 3",
     "other_metric{a=\"b\"} 1", "DCGM_FI_DEV_GPU_UTIL 7"]
)  # fmt: skip


@st.composite
def scrape_variant(draw: st.DrawFn) -> tuple[str, frozenset[str]]:
    name = draw(st.sampled_from(sorted(CAPTURES)))
    text, families = CAPTURES[name]
    lines = text.splitlines()
    picked = draw(st.lists(st.integers(0, len(lines) - 1), min_size=1, max_size=60))
    out: list[str] = []
    for i in picked:  # a subset of the lines, in any order, some twice: families split and re-form
        line = lines[i]
        if line and not line.startswith("#") and draw(st.booleans()):
            line = draw(sample_variant(line))
        out.append(line)
        if draw(st.integers(0, 5)) == 0:
            out.append(draw(EXTRA_LINES))
    if draw(st.booleans()):
        out = lines[: draw(st.integers(0, len(lines)))] + out  # a prefix in order, then the variations
    return "\n".join(out) + "\n", families


@SETTINGS
@given(variant=scrape_variant())
def test_variations_of_real_scrapes_read_as_prometheus_client_reads_them(
    variant: tuple[str, frozenset[str]],
) -> None:
    text, families = variant
    try:
        reference = reference_parse(text, families)
    except MetricsParseError:  # e.g. a TYPE of info whose samples are then read as an info family
        with pytest.raises(MetricsParseError):
            parse_prometheus_text(text, families=families)
        return
    assert parse_prometheus_text(text, families=families) == reference


GARBLE = st.sampled_from([*'{}",= \t\\#_:aZ09.+-eE', "\x0c", "\u2003", "\u00e9", "NaN", "Inf", "__"])


@SETTINGS
@given(
    name=st.sampled_from(sorted(CAPTURES)),
    index=st.integers(0, 10_000),
    edits=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 2), GARBLE), min_size=1, max_size=4),
)
def test_a_garbled_line_is_refused_or_read_as_prometheus_client_reads_it(
    name: str, index: int, edits: list[tuple[int, int, str]]
) -> None:
    text, families = CAPTURES[name]
    lines = text.splitlines()
    kept = [i for i, line in enumerate(lines) if promtext.family_lines(line + "\n", families)]
    i = kept[index % len(kept)]
    line = lines[i]
    for at, cut, insert in edits:  # replace `cut` characters at `at` with `insert`
        at %= len(line) + 1
        line = line[:at] + insert + line[at + cut :]
    body = "\n".join([*lines[:i], line, *lines[i + 1 :]]) + "\n"
    try:
        ours = parse_prometheus_text(body, families=families)
    except MetricsParseError as exc:
        assert "\n" not in str(exc)  # one line naming the problem
        return
    assert ours == reference_parse(body, families), line  # accepted: read exactly as the reference reads it


# -- what it refuses, and how --------------------------------------------------------------------------------
FAMS = frozenset({"m"})


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('m{a="1" 2', "without a closing }"),
        ('m{a="1"}} 2', "bad labels"),
        ('m{a="1"} x', "no value"),
        ('m{a="1"} 0x10', "no value"),
        ('m{a="1"} 1_000', "no value"),
        ('m{a="1"} 1 2 3', "no value"),
        ('m{a="1"}1', "no value"),
        ('m{a="1",a="2"} 1', "a label given twice"),
        ('m{__name__="m"} 1', "a reserved label"),
        ('m{a:b="1"} 1', "bad labels"),
        ('m{a="1",,b="2"} 1', "bad labels"),
        ("m", "no value"),
        ("# TYPE m", "without a type"),
        ("# TYPE m gauge extra", "is not a metric type"),
        ('# TYPE m_"x gauge', "quoted metric name"),
    ],
)
def test_a_line_outside_the_format_refuses_the_body_naming_the_problem(line: str, problem: str) -> None:
    with pytest.raises(MetricsParseError, match=problem) as err:
        parse_prometheus_text(f"# TYPE m gauge\n{line}\n", families=FAMS)
    assert "\n" not in str(err.value)


def test_only_the_families_asked_for_are_read_and_other_lines_cost_no_error() -> None:
    text = '# HELP m doc\n# TYPE m gauge\nm{a="x"} 1\nm_total 2\nother{ garbage\nm_sub_part 3\n'
    assert [(s.name, s.family, s.type, dict(s.labels), s.value) for s in _same(text, FAMS)] == [
        ("m", "m", "gauge", {"a": "x"}, 1.0),
        ("m_total", "m_total", "unknown", {}, 2.0),
    ]


def test_counters_and_histograms_take_the_names_prometheus_client_gives_them() -> None:
    text = (
        "# TYPE c counter\nc 3\n# TYPE d_total counter\nd_total 4\n"
        '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\nh 9\n'
    )
    got = [(s.name, s.family, s.type) for s in _same(text, frozenset({"c", "d", "h"}))]
    assert got == [
        ("c_total", "c", "counter"),
        ("d_total", "d", "counter"),
        ("h_bucket", "h", "histogram"),
        ("h_bucket", "h", "histogram"),
        ("h_sum", "h", "histogram"),
        ("h_count", "h", "histogram"),
        ("h", "h", "unknown"),  # a histogram has no plain sample: a family of its own
    ]


def test_a_series_read_once_is_read_the_same_again_with_a_new_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promtext, "_HEADS", {})
    monkeypatch.setattr(promtext, "_MAX_HEADS", 2)
    for n in range(5):  # more series than the bound: the remembered heads start over, nothing else changes
        text = f'# TYPE m gauge\nm{{a="{n}"}} {n}\nm{{a="x\\"y"}} {n + 0.5}\n'
        assert [(dict(s.labels), s.value) for s in _same(text, FAMS)] == [
            ({"a": str(n)}, float(n)),
            ({"a": 'x"y'}, n + 0.5),
        ]
        assert len(promtext._HEADS) <= 2


def test_a_line_seen_before_is_not_read_again_and_the_cache_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(promtext, "_LINES", {})
    monkeypatch.setattr(promtext, "_MAX_LINES", 4)
    read: list[str] = []
    real = promtext._read_sample
    monkeypatch.setattr(promtext, "_read_sample", lambda line: read.append(line) or real(line))
    text = '# TYPE m gauge\nm{a="1"} 1\nm{a="2"} 2\n'
    for _ in range(3):  # three scrapes of the same lines: each line read once
        assert [(dict(s.labels), s.value) for s in _same(text, FAMS)] == [
            ({"a": "1"}, 1.0),
            ({"a": "2"}, 2.0),
        ]
    assert read == ['m{a="1"} 1', 'm{a="2"} 2']
    for n in range(9):  # a value that moves: a new line each time, more than the bound
        assert [s.value for s in _same(f'# TYPE m gauge\nm{{a="1"}} {n}\nm{{a="2"}} 2\n', FAMS)] == [n, 2.0]
        assert len(promtext._LINES) <= 4


@SETTINGS
@given(variant=scrape_variant(), bound=st.integers(1, 40))
def test_lines_read_from_the_cache_read_as_lines_read_afresh(
    variant: tuple[str, frozenset[str]], bound: int
) -> None:
    """A body read with a cold line cache, then again from it (a small bound: some lines start over
    midway), reads as prometheus_client reads it both times."""
    text, families = variant
    try:
        reference = reference_parse(text, families)
    except MetricsParseError:
        return  # refusals: the tests above
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(promtext, "_LINES", {})
        mp.setattr(promtext, "_MAX_LINES", bound)
        assert parse_prometheus_text(text, families=families) == reference
        assert parse_prometheus_text(text, families=families) == reference
        assert len(promtext._LINES) <= bound


def test_what_a_reader_works_out_from_labels_is_worked_out_once_per_series() -> None:
    derived: list[dict[str, str]] = []
    gpu_of = promtext.PerLabelSet(lambda labels: derived.append(dict(labels)) or labels.get("gpu"))
    text = '# TYPE m gauge\nm{gpu="0"} 1\nm{gpu="1"} 2\n'
    for _ in range(3):  # three scrapes of the same two series
        assert [gpu_of(s.labels) for s in parse_prometheus_text(text, families=FAMS)] == ["0", "1"]
    assert derived == [{"gpu": "0"}, {"gpu": "1"}]
    # a mapping made afresh (the Prometheus source's) with the same labels, or other labels at a freed
    # mapping's address, is derived for itself: the answer is never another mapping's
    assert [gpu_of({"gpu": str(k)}) for k in range(50)] == [str(k) for k in range(50)]


def test_the_collector_does_not_load_prometheus_clients_parser() -> None:
    # one parser per format: the daemon reads /metrics with collectors/promtext.py only
    code = (
        "import sys; import spectower.collectors.daemon, spectower.collectors.prometheus; "
        "print('prometheus_client.parser' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
