"""plan.json's text: the same document ``json.dumps`` writes (parsed back, field for field), a
top-level field per line and, in the tensor, op and reshard sections, one record per line.

Oracle: the json module itself, on the plan's dictionary and on the text.
"""

from __future__ import annotations

import json
from pathlib import Path

import autoshard
from autoshard.planning.record import RECORD_SECTIONS, Plan
from graphs import zoo


def test_plan_json_is_the_plans_document_a_record_per_line(tmp_path: Path) -> None:
    graph = zoo.build("gpt2", layers=2, batch=8, seq=32, hidden=64, heads=4, vocab=512)
    # Megatron's layouts, so every section has records
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=4"), training=True,
                          strategy="megatron")
    plan.save(tmp_path)
    text = (tmp_path / "plan.json").read_text()
    document = plan.to_dict()
    assert json.loads(text) == json.loads(json.dumps(document, indent=1))
    assert Plan.load(tmp_path) == plan
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and text.endswith("}\n")
    # every top-level field starts its own line, in the document's order
    starts = [line[1:].split(":", 1)[0] for line in lines if line.startswith(' "')]
    assert [json.loads(key) for key in starts] == list(document)
    for section in RECORD_SECTIONS:
        records = document[section]
        assert records, f"the plan has no {section}"
        entries = records.items() if isinstance(records, dict) else enumerate(records)
        for key, record in entries:
            line = (f"  {json.dumps(key)}: " if isinstance(records, dict) else "  ") \
                + json.dumps(record)
            assert line in lines or line + "," in lines, (section, key)
