"""README.md's model section is what models/readme.py generates from the registry (fails when stale:
run ./bazelw run //models:readme)."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
from vllm_server import runfile  # noqa: E402

from models import readme, registry  # noqa: E402

README = runfile("README.md")


def test_readme_model_section_is_current():
    text = README.read_text()
    assert readme.rewrite(text) == text, "README.md's model section is stale: run ./bazelw run //models:readme"


def test_every_product_model_and_format_has_a_row():
    text = README.read_text()
    for family in registry.product_entries():
        for fmt in family["formats"]:
            assert f"| {family['model']} | `{family['architecture']}` | {fmt} |" in text


def test_a_changed_status_makes_the_section_stale():
    text = README.read_text()
    # A cell changed in the module's entry (product_entries() copies). Its how-list shows even where a
    # recorded GPU run overrides the status (every cell may be verified).
    module = registry.PRODUCTS[0]
    fmt, spec = next(iter(module.FAMILY["formats"].items()))
    cell = next(iter(spec["sm"].values()))
    saved = dict(cell)
    try:
        cell["status"], cell["why"], cell["how"] = "expected", "pretend", ["pretend how"]
        assert readme.rewrite(text) != text
    finally:
        cell.clear()
        cell.update(saved)


def test_registry_entries_follow_the_schema():
    for family in registry.product_entries():
        registry.validate(family)
    bad = {**registry.product_entries()[1], "on_wip": "maybe"}
    with pytest.raises(ValueError, match="on_wip"):
        registry.validate(bad)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
