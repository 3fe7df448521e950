"""The MCP tools' schemas: generated from the engine's request models, checked by the same code as the language
server's requests, and portable to every MCP client.

`portability_problems` applies the rules the MCP Inspector's `--cli --strict` schema lint applies (its
`core/json/schemaLint.ts`: an input schema whose root is not an object; a bare `true`/`false` where a schema
object is expected; `type` spelt as an array such as `["string", "null"]`) and the neighbouring rules client
linters report (a nullable `anyOf`/`oneOf` with a `null` branch; `$ref`/`$defs`, which some clients do not
resolve; a property or branch without a `type`; `format` values outside the widely supported set; OpenAPI's
`discriminator`; `required` that is not a list of declared properties; an empty `enum`), plus this server's own
contract: every input object with declared properties is closed (`additionalProperties: false`), as the server
refuses unknown arguments. The last test runs the real `saipling mcp` and checks what it lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixtures import retrieval_project
from saipling.errors import InvalidRequest
from saipling.mcp.server import TOOLS, check_arguments
from saipling.retrieval.requests import REQUESTS, arguments_schema, parse

# keywords whose value may be a bare boolean (JSON Schema allows it there and clients accept it)
BOOLEAN_VALUED = {
    "additionalProperties",
    "unevaluatedProperties",
    "uniqueItems",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "readOnly",
    "writeOnly",
    "deprecated",
}
# keywords holding one subschema, or a list of them, or a map of name -> subschema
ONE_SCHEMA = {"items", "additionalProperties", "not", "contains", "propertyNames", "unevaluatedProperties"}
SCHEMA_LIST = {"anyOf", "oneOf", "allOf", "prefixItems"}
SCHEMA_MAP = {"properties", "patternProperties", "$defs", "definitions"}
PORTABLE_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
TYPED = ("type", "enum", "const")


def portability_problems(schema: Any, kind: str = "input") -> list[str]:
    """Every portability problem of one tool schema, as `path: problem` lines (empty when portable)."""
    problems: list[str] = []
    if not isinstance(schema, dict) or (kind == "input" and schema.get("type") != "object"):
        problems.append('root: an input schema must be an object schema with type "object"')
    _walk(schema, "root", kind, problems, typed=False)
    return problems


def _walk(node: Any, path: str, kind: str, problems: list[str], typed: bool) -> None:
    if isinstance(node, bool):
        problems.append(f"{path}: bare {str(node).lower()} where a schema object is expected")
        return
    if not isinstance(node, dict):
        problems.append(f"{path}: a schema must be an object, not {type(node).__name__}")
        return
    say = problems.append
    if isinstance(node.get("type"), list):
        say(f"{path}: type is an array {node['type']} (a nullable or union type)")
    if node.get("type") == "null":
        say(f"{path}: a null type (leave the field out instead)")
    for key in ("$ref", "$defs", "definitions", "discriminator"):
        if key in node:
            say(f"{path}: uses {key}")
    if "format" in node and node["format"] not in PORTABLE_FORMATS:
        say(f"{path}: format {node['format']!r} is not widely supported")
    if "enum" in node and not node["enum"]:
        say(f"{path}: an empty enum")
    if typed and not any(k in node for k in TYPED):
        say(f"{path}: no type")
    if "required" in node:
        declared = node.get("properties", {})
        if not isinstance(node["required"], list) or any(r not in declared for r in node["required"]):
            say(f"{path}: required must list declared properties, got {node['required']!r}")
    if kind == "input" and node.get("type") == "object" and node.get("properties"):
        if node.get("additionalProperties") is not False:
            say(f"{path}: an input object that does not say additionalProperties: false")
    for key, value in node.items():
        where = f"{path}.{key}"
        if key in SCHEMA_LIST:
            for i, branch in enumerate(value):
                if isinstance(branch, dict) and branch.get("type") == "null":
                    say(f"{where}[{i}]: a null branch (a nullable union: leave the field out instead)")
                else:
                    _walk(branch, f"{where}[{i}]", kind, problems, typed=True)
        elif key in SCHEMA_MAP:
            for name, sub in value.items():
                _walk(sub, f"{where}.{name}", kind, problems, typed=True)
        elif key in ONE_SCHEMA:
            if isinstance(value, bool) and key in BOOLEAN_VALUED:
                continue
            _walk(value, where, kind, problems, typed=True)


BAD = [
    ({"type": "array", "items": {"type": "string"}}, "root"),
    ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "additionalProperties": False}, "array"),
    (
        {
            "type": "object",
            "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "additionalProperties": False,
        },
        "null branch",
    ),
    ({"type": "object", "properties": {"a": True}, "additionalProperties": False}, "bare true"),
    ({"type": "object", "properties": {"a": {"description": "anything"}}, "additionalProperties": False}, "no type"),
    (
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "string"}},
            "additionalProperties": False,
        },
        "$ref",
    ),
    (
        {"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}, "additionalProperties": False},
        "format",
    ),
    (
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"], "additionalProperties": False},
        "required",
    ),
    ({"type": "object", "properties": {"a": {"type": "string"}}}, "additionalProperties"),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}},
            "additionalProperties": False,
        },
        "additionalProperties",
    ),
]


@pytest.mark.parametrize(("schema", "problem"), BAD)
def test_the_check_finds_each_unportable_shape(schema: dict, problem: str) -> None:
    found = portability_problems(schema)
    assert any(problem in p for p in found), found


def test_every_tool_schema_is_portable() -> None:
    assert {t.name for t in TOOLS} == {
        "search",
        "get",
        "enrich_context",
        "related",
        "status",
        "mentions",
        "check_passage",
        "names",
    }
    for tool in TOOLS:
        assert portability_problems(tool.input_schema, "input") == [], tool.name
        assert portability_problems(tool.output_schema, "output") == [], tool.name
        for name, field in tool.input_schema["properties"].items():
            assert len(field.get("description", "")) > 10, f"{tool.name}.{name} has no description"


def test_a_tool_schema_is_the_request_schema_restricted_to_the_agent_fields() -> None:
    search = next(t for t in TOOLS if t.name == "search")
    lsp = arguments_schema(REQUESTS["saipling/search"], tuple(search.fields))
    assert search.input_schema == lsp  # one schema: the same model, the same generator
    assert search.request is REQUESTS["saipling/search"]
    assert set(search.input_schema["properties"]) == {"query", "maxResults", "mode", "minScore", "filter"}
    assert search.input_schema["properties"]["maxResults"]["maximum"] == 100
    with pytest.raises(ValueError, match="noSuchField"):
        arguments_schema(REQUESTS["saipling/search"], ("query", "noSuchField"))


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"query": "ferry", "maxResults": "3"}, "maxResults"),
        ({"query": "ferry", "maxResults": 0}, "maxResults"),
        ({"query": "ferry", "mode": "fuzzy"}, "mode"),
        ({"query": "  "}, "query"),
        ({"query": "ferry", "filter": {"bookID": "b"}}, "filter.bookID"),
        ({"query": "ferry", "filter": {"glob": "[z-a].md"}}, "filter.glob"),
        ({"query": "ferry", "minScore": float("nan")}, "minScore"),
    ],
)
def test_a_tool_argument_is_refused_with_the_language_servers_message(args: dict, field: str) -> None:
    search = next(t for t in TOOLS if t.name == "search")
    with pytest.raises(InvalidRequest) as mcp:
        check_arguments(search, args)
    with pytest.raises(InvalidRequest) as lsp:
        parse(REQUESTS["saipling/search"], args)
    assert mcp.value.field == lsp.value.field == field
    assert str(mcp.value) == str(lsp.value)


def test_null_arguments_count_as_absent_and_fields_outside_the_tool_are_refused() -> None:
    tools = {t.name: t for t in TOOLS}
    assert check_arguments(tools["search"], {"query": "ferry", "mode": None, "filter": None}) == {"query": "ferry"}
    with pytest.raises(InvalidRequest, match="query: is required"):
        check_arguments(tools["search"], {"query": None})
    with pytest.raises(InvalidRequest, match=r"role: is not a parameter of search"):
        check_arguments(tools["search"], {"query": "ferry", "role": "author"})  # the language server's, not here
    with pytest.raises(InvalidRequest, match=r"maxResult: .*did you mean maxResults\?"):
        check_arguments(tools["search"], {"query": "ferry", "maxResult": 3})
    with pytest.raises(InvalidRequest, match="path: is required"):
        check_arguments(tools["related"], {"maxResults": 2})
    with pytest.raises(InvalidRequest, match="arguments"):
        check_arguments(tools["status"], ["not", "an", "object"])


async def test_the_real_server_lists_portable_schemas_generated_from_the_requests(tmp_path: Path) -> None:
    from test_mcp import call, mcp_session

    async with mcp_session(retrieval_project(tmp_path)) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        # an answer that had nulls validates against its output schema (the SDK client checks it): absent
        searched = await call(session, "search", {"query": "zephyrine", "mode": None})
        status = await call(session, "status")
    assert set(listed) == {t.name for t in TOOLS}
    for tool in TOOLS:
        served = listed[tool.name]
        assert served.input_schema == tool.input_schema
        assert portability_problems(served.input_schema, "input") == [], tool.name
        assert portability_problems(served.output_schema, "output") == [], tool.name
    assert searched["results"] and searched["degraded"]  # provider none: keyword only, said so
    assert None not in status.values() and None not in searched["results"][0].values()
