"""The stored benchmark results read as bench/README.md says: `python -m bench.plot --summary` and `--markdown`."""

import json

from bench.plot import RESULTS, markdown, summary


def test_every_stored_result_has_tables_of_rows():
    paths = sorted(RESULTS.glob("*.json"))
    assert paths
    for path in paths:
        result = json.loads(path.read_text())
        assert result["benchmark"] == path.stem and result.get("gpu") and result.get("commit"), path.name
        tables = result["tables"]
        assert isinstance(tables, dict) and tables, path.name
        for name, table in tables.items():
            assert isinstance(table.get("rows"), list) and table["rows"], f"{path.name}: table {name}"
            assert all(isinstance(row, dict) for row in table["rows"]), f"{path.name}: table {name}"


def test_summary_and_markdown_read_every_result():
    paths = sorted(RESULTS.glob("*.json"))
    lines = summary(paths).splitlines()
    assert len(lines) == 1 + len(paths)
    assert all(markdown(json.loads(path.read_text())) for path in paths)
