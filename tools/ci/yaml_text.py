"""YAML text for plain data (dicts, lists, strings, booleans, integers), written the same way every
time so a generated file can be compared byte for byte. Standard library only.

Dicts keep their insertion order. Strings that YAML 1.1 readers would take for something else
("on", "yes", "1.0", "*", "a: b") are double-quoted; multi-line strings become literal blocks.
"""

import json
import re

INDENT = "  "
# Safe unquoted in block context: a harmless first character, no ": " or " #" inside (checked
# below), and none of the characters that need escapes.
_PLAIN = re.compile(r"^[A-Za-z_./$][A-Za-z0-9_./${}()\[\]|&=<>!@%+*,:'\" #-]*$")
_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"yaml_text: cannot write {type(value).__name__} {value!r}")
    plain = (_PLAIN.match(value) and value.lower() not in _WORDS and not value.endswith((" ", ":"))
             and ": " not in value and " #" not in value)
    return value if plain else json.dumps(value)


def _block(text, depth):
    if text.startswith((" ", "\n")):
        raise ValueError(f"yaml_text: a literal block cannot start with blank space: {text[:20]!r}")
    chomp = "" if text.endswith("\n") else "-"
    lines = text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    body = [(INDENT * depth + line) if line else "" for line in lines]
    return "|" + chomp, body


def _value_lines(value, depth):
    """(text after "key:" or "-" on the same line, lines below it)."""
    if isinstance(value, dict):
        return ("{}", []) if not value else ("", _lines(value, depth))
    if isinstance(value, list):
        return ("[]", []) if not value else ("", _lines(value, depth))
    if isinstance(value, str) and "\n" in value:
        return _block(value, depth)
    return scalar(value), []


def _lines(data, depth):
    pad = INDENT * depth
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            inline, below = _value_lines(value, depth + 1)
            out.append(f"{pad}{scalar(key)}:" + (f" {inline}" if inline else ""))
            out.extend(below)
    else:
        for item in data:
            if isinstance(item, dict) and item:
                first, *rest = _lines(item, depth + 1)
                out.append(f"{pad}- {first.lstrip()}")
                out.extend(rest)
            else:
                inline, below = _value_lines(item, depth + 1)
                out.append(f"{pad}-" + (f" {inline}" if inline else ""))
                out.extend(below)
    return out


def dump(data, header=""):
    """The YAML document for data, after header (comment lines, each starting with "#")."""
    return header + "\n".join(_lines(data, 0)) + "\n"
