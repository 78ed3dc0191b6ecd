"""Fuzz the loader: any text or value gives a config or a ConfigError, never a traceback."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lamplighter.configs.loader import ConfigError, parse
from lamplighter.configs.schema import JobConfig, NodeConfig

SECTIONS = ["trainer", "groups", "lighthouse", "torchft", "slurm", "health", "restart", "chaos", "name", "run_dir"]
KEYS = ["count", "port", "steps", "command", "env", "extra_sbatch", "hang_timeout_s", "min_replicas", "model", "x"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
docs = st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=10), values, max_size=6)


def outcome(model: type, text: str) -> None:
    try:
        parse(model, text, "fuzz.yaml")
    except ConfigError as e:
        assert e.problems and all(str(p).startswith("fuzz.yaml") for p in e.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs)
def test_structured_documents(doc: dict) -> None:
    outcome(JobConfig, yaml.safe_dump(doc))
    outcome(NodeConfig, yaml.safe_dump(doc))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text(text: str) -> None:
    outcome(JobConfig, text)
