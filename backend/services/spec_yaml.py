"""A job spec as YAML a person can read and `streamrl jobs submit` accepts unchanged: multi-line strings (python
reward code, environments) as `|` block scalars instead of one escaped line."""

from __future__ import annotations

from typing import Any

import yaml


class _SpecDumper(yaml.SafeDumper):
    pass


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # a line ending in spaces cannot be written as a block (PyYAML would quote it anyway): such text stays quoted
    if "\n" in value and all(line == line.rstrip(" ") for line in value.split("\n")):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_SpecDumper.add_representer(str, _string)


def spec_yaml(spec: dict[str, Any]) -> str:
    """The spec as YAML (key order kept, code as block scalars); `yaml.safe_load` gives back the same spec."""
    return yaml.dump(spec, Dumper=_SpecDumper, sort_keys=False, allow_unicode=True)
