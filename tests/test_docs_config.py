"""docs/configuration.md documents every key the config parser accepts, and no other.

The keys are the parser's own key tuples (grps_py.core.config, grps_py.core.protection), placed at
their section paths in SERVER and INFERENCE below. The page names each key in the first column of a
table under its file's heading, as a dotted path where `[]` stands for every entry of a list
(`models[].batching.max_batch_size`). The page's two complete examples are read by the real parser,
which also confirms the section paths: a key tuple at another path than SERVER / INFERENCE say fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from grps_py.core import config, protection
from grps_py.core.config import (
    _BATCHING_KEYS,
    _CUSTOM_HTTP_KEYS,
    _DAG_KEYS,
    _GPU_KEYS,
    _INFERENCE_KEYS,
    _INTERFACE_KEYS,
    _LOG_KEYS,
    _METRICS_KEYS,
    _MODEL_KEYS,
    _NODE_KEYS,
    _SERVER_KEYS,
    _STREAMING_KEYS,
    _TENSOR_KEYS,
    _WARMUP_KEYS,
    parse_inference_settings,
    parse_server_settings,
)
from grps_py.core.generation_config import GENERATION_KEYS, OPENAI_KEYS, SERVER_OPENAI_KEYS
from grps_py.core.protection import LIMITS_KEYS, SECURITY_KEYS, TLS_KEYS
from grps_py.core.sequence import CONTROL_KINDS, SEQUENCE_KEYS
from grps_py.core.yaml_fields import Fields

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

Sections = Mapping[str, Sequence[str]]  # section path ("" for the file's top) -> the keys it accepts

SERVER: Sections = {
    "": _SERVER_KEYS,
    "interface": _INTERFACE_KEYS,
    "interface.customized_predict_http[]": _CUSTOM_HTTP_KEYS,
    "interface.customized_predict_http[].streaming_ctrl": _STREAMING_KEYS,
    "gpu": _GPU_KEYS,
    "log": _LOG_KEYS,
    "metrics": _METRICS_KEYS,
    "limits": LIMITS_KEYS,
    "security": SECURITY_KEYS,
    "tls": TLS_KEYS,
    "openai": SERVER_OPENAI_KEYS,
}
INFERENCE: Sections = {
    "": _INFERENCE_KEYS,
    "models[]": _MODEL_KEYS,
    "models[].batching": _BATCHING_KEYS,
    "models[].warmup": _WARMUP_KEYS,
    "models[].sequence_batching": SEQUENCE_KEYS,
    "models[].sequence_batching.control_inputs": CONTROL_KINDS,
    "models[].generation": GENERATION_KEYS,
    "models[].openai": OPENAI_KEYS,
    "models[].inputs[]": _TENSOR_KEYS,
    "models[].outputs[]": _TENSOR_KEYS,
    "dag": _DAG_KEYS,
    "dag.nodes[]": _NODE_KEYS,
}
FILES: dict[str, Sections] = {"server.yml": SERVER, "inference.yml": INFERENCE}
PARSERS: dict[str, Callable[[object, str, Path], object]] = {
    "server.yml": parse_server_settings,
    "inference.yml": parse_inference_settings,
}
# Key tuples spliced into a section's tuple (name -> the section's tuple), not sections of their own.
PARTS = {"_ADDED_SERVER_KEYS": _SERVER_KEYS, "_INFERER_KEYS": _MODEL_KEYS, "_CONVERTER_KEYS": _MODEL_KEYS}

KEY_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")  # a table row whose first cell is one `key`
HEADING = re.compile(r"^#{2,6} ")
DOTTED = re.compile(r"`([a-z_]+(?:\[\])?(?:\.[a-z_]+(?:\[\])?)+)`")  # `a.b`, `a[].b.c` anywhere
COMMENTED_SETTING = re.compile(r"^(\s*)# (\s*(?:- )?[a-z_]+:(?:\s.*)?)$")  # "# key: value", "#   key:"


def join(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def key_paths(sections: Sections) -> dict[str, bool]:
    """Every key's dotted path, and whether it opens a section (a mapping, or a list of mappings)."""
    paths = {}
    for section, keys in sections.items():
        for key in keys:
            path = join(section, key)
            paths[path] = path in sections or f"{path}[]" in sections
    return paths


def file_parts(text: str) -> dict[str, str]:
    """The page's text under each `## server.yml` / `## inference.yml` heading, up to the next `## `;
    the rest of the page under ""."""
    parts: dict[str, list[str]] = {"": []}
    current = parts[""]
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            current = parts.setdefault(title, []) if title in FILES else parts[""]
        current.append(line)
    return {name: "\n".join(lines) for name, lines in parts.items()}


def key_rows(text: str) -> Iterator[tuple[str, list[str]]]:
    """(key, the other cells) of each table row whose first cell is a single `key`."""
    for line in text.splitlines():
        match = KEY_ROW.match(line)
        if match:
            yield match.group(1), [cell.strip() for cell in match.group(2).split("|")]


def problems(text: str) -> list[str]:
    """What the page gets wrong about the keys; empty when every key has one row and no row is stray."""
    found: list[str] = []
    parts = file_parts(text)
    found += [f"no '## {name}' section" for name in FILES if name not in parts]
    outside = parts.pop("")
    found += [
        f"the row `{key}` is outside the server.yml and inference.yml sections"
        for key, _ in key_rows(outside)
    ]
    for name, part in parts.items():
        paths = key_paths(FILES[name])
        rows = list(key_rows(part))
        documented = [key for key, _ in rows]
        headings = "\n".join(line for line in part.splitlines() if HEADING.match(line))
        for path, is_section in paths.items():
            count = documented.count(path)
            if count > 1:
                found.append(f"{name}: `{path}` has {count} rows")
            if count == 0 and not (is_section and f"`{path}`" in headings):
                found.append(f"{name}: `{path}` is not documented (no table row)")
        for key, cells in rows:
            if key not in paths:
                found.append(f"{name}: the row `{key}` is not a key the parser accepts")
            elif len(cells) != 3 or not all(cells):
                found.append(f"{name}: the row `{key}` needs a default, values and a meaning")
    return found + stray_paths(text)


def stray_paths(text: str) -> list[str]:
    """Dotted key paths written anywhere on the page (prose included) that are no key."""
    known = {path for sections in FILES.values() for path in [*key_paths(sections), *sections]}
    tops = {path.split(".")[0].removesuffix("[]") for path in known}
    return [
        f"`{path}` is written on the page but is no key"
        for path in sorted(set(DOTTED.findall(text)))
        if path.split(".")[0].removesuffix("[]") in tops and path not in known
    ]


def test_sections_are_the_parsers_key_tuples() -> None:
    """Every *_KEYS tuple of the parser is placed at a section path here (or spliced into one), so a
    new section cannot go unchecked; and every section hangs from a key of its parent section."""
    placed = [keys for sections in FILES.values() for keys in sections.values()]
    for module in (config, protection):
        for name, value in vars(module).items():
            if not (name.endswith("_KEYS") and isinstance(value, tuple)):
                continue
            if name in PARTS:
                owner = PARTS[name]
                starts = [i for i in range(len(owner)) if owner[i : i + len(value)] == value]
                assert starts, f"{name} is no longer part of the section tuple it was spliced into"
            else:
                where = f"{module.__name__}.{name}"
                assert any(value is keys for keys in placed), f"{where}: give its section path here"
    for sections in FILES.values():
        paths = key_paths(sections)
        for section in sections:
            assert not section or section.removesuffix("[]") in paths, f"{section} hangs from no key"


def test_every_key_has_one_row_and_every_row_is_a_key() -> None:
    assert problems(PAGE.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("| `limits.idle_timeout_s` |", "`limits.idle_timeout_s` is not documented"),
        ("| `models[].batching.max_batch_size` |", "`models[].batching.max_batch_size` is not documented"),
        ("| `dag.nodes[].inputs` |", "`dag.nodes[].inputs` is not documented"),
    ],
)
def test_a_missing_row_is_found(row: str, expected: str) -> None:
    text = PAGE.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith(row)]
    assert len(lines) == len(text.splitlines()) - 1
    assert any(expected in problem for problem in problems("\n".join(lines)))


def test_a_stray_row_is_found() -> None:
    text = PAGE.read_text(encoding="utf-8")
    row = "| `limits.idle_timeout_s` |"
    bad = text.replace(row, "| `limits.idle_timeout_ms` |", 1)
    bad = bad.replace("| `log.format` |", "| `models[].format` |", 1)
    found = problems(bad)
    assert "server.yml: the row `limits.idle_timeout_ms` is not a key the parser accepts" in found
    assert "server.yml: the row `models[].format` is not a key the parser accepts" in found
    assert "`limits.idle_timeout_ms` is written on the page but is no key" in found


def example(name: str) -> str:
    """The page's complete example of `name`: the ```yaml block opening with `# conf/NAME`."""
    blocks: list[str] = re.findall(r"^```yaml\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.M | re.S)
    found = [block for block in blocks if block.startswith(f"# conf/{name}\n")]
    assert len(found) == 1, f"one ```yaml block starting '# conf/{name}' expected, found {len(found)}"
    return found[0]


def uncommented(text: str) -> str:
    """The example with its commented-out settings (`# key: value`, `#   key: value`) put back."""
    return "\n".join(COMMENTED_SETTING.sub(r"\1\2", line) for line in text.splitlines())


def touch_paths(data: object, root: Path) -> None:
    """Create the files the example names (`*_path`, `*_file`, `file`), as the parser wants them to exist."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str) and (key.endswith(("_path", "_file")) or key == "file"):
                (root / value).parent.mkdir(parents=True, exist_ok=True)
                (root / value).touch()
            touch_paths(value, root)
    elif isinstance(data, list):
        for item in data:
            touch_paths(item, root)


def read_recording(
    name: str, text: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, tuple[tuple[str, ...], set[str]]]:
    """Parse `text` as `name` with the real parser; for each section it read: its accepted keys and
    the keys the example set there."""
    seen: dict[str, tuple[tuple[str, ...], set[str]]] = {}
    original = Fields.__init__

    def record(self: Fields, data: object, source: str, prefix: str, allowed: Sequence[str]) -> None:
        original(self, data, source, prefix, allowed)
        path = re.sub(r"\[\d+\]", "[]", prefix)
        if path not in FILES[name] and f"{path}[]" in FILES[name]:
            path += "[]"  # grps's single-mapping form of a list section
        seen.setdefault(path, (tuple(allowed), set()))[1].update(self.data)

    data: Any = yaml.safe_load(text)
    touch_paths(data, root)
    with monkeypatch.context() as patch:
        patch.setattr(Fields, "__init__", record)
        PARSERS[name](data, f"docs/configuration.md ({name})", root)
    return seen


@pytest.mark.parametrize("name", FILES)
def test_complete_example_parses_and_sets_every_key(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = example(name)
    read_recording(name, text, tmp_path, monkeypatch)  # valid as printed
    seen = read_recording(name, uncommented(text), tmp_path, monkeypatch)  # and with every option on
    sections = FILES[name]
    for path, (allowed, _) in seen.items():
        assert path in sections, f"the parser reads a section at {path!r}; add it to {name}'s sections"
        assert allowed == tuple(sections[path]), f"{path}: the parser accepts {allowed}"
    set_in_example = {join(path, key) for path, (_, keys) in seen.items() for key in keys}
    assert sorted(set(key_paths(sections)) - set_in_example) == []
