"""The one jinja2 environment: StrictUndefined, templates shipped beside this module."""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).parent / "templates"


def yaml_block(text: str, indent: int) -> str:
    """``text`` as a YAML scalar at ``indent`` spaces: a literal block when that keeps it exact."""
    lines = text.split("\n")
    body = lines[:-1] if text.endswith("\n") else lines
    exact = (
        text
        and not text[0].isspace()
        and "\t" not in text
        and "\r" not in text
        and not text.endswith("\n\n")
        and all(line == line.rstrip(" ") for line in body)
    )
    if not exact:
        return json.dumps(text)
    chomp = "" if text.endswith("\n") else "-"
    pad = " " * indent
    return f"|{chomp}\n" + "\n".join(pad + line if line else "" for line in body)


@cache
def environment(folder: Path = TEMPLATES) -> jinja2.Environment:
    """The one jinja setup every template of the toolkit renders with (``folder``: whose templates)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["yaml_block"] = yaml_block
    # A JSON string is a valid YAML double-quoted scalar; unlike jinja's tojson it leaves <, >, &
    # and ' readable (tojson escapes them for HTML).
    env.filters["yaml_str"] = lambda value: json.dumps(str(value))
    env.filters["sh"] = shlex.quote
    return env


def render(template: str, **values: Any) -> str:
    return environment().get_template(template).render(**values)
