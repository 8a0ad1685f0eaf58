#!/usr/bin/env python3
"""Generates the Python client's typed models and resources from memtape's OpenAPI document.

`python3 sdk/python/scripts/generate.py` rewrites `memtape/_models.py` and
`memtape/_resources.py` from `crates/memtape-server/openapi.json` (the document the server
serves, kept current by the server's own snapshot test); `--check` fails when the committed
files differ from a fresh generation, so an API change that was not carried into the client
fails the tests. Every operation must have a name in `OPERATIONS`: a new route without one
stops the generator.
"""

from __future__ import annotations

import argparse
import json
import keyword
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = ROOT / "crates" / "memtape-server" / "openapi.json"
PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "memtape"

# (method, path) -> (resource, method name). A resource of None is a method of the client
# itself. Names follow what the route does, as the CLI names it.
OPERATIONS: dict[tuple[str, str], tuple[str | None, str]] = {
    ("get", "/healthz"): (None, "health"),
    ("get", "/v1/agents"): ("agents", "list"),
    ("get", "/v1/search"): (None, "search"),
    ("post", "/v1/erase"): (None, "erase"),
    ("get", "/v1/export"): (None, "export"),
    ("post", "/v1/import"): (None, "import_"),
    ("get", "/v1/entries/{id}/thread"): ("entries", "thread"),
    ("get", "/v1/sessions"): ("sessions", "list"),
    ("post", "/v1/sessions/{session}/messages"): ("sessions", "append"),
    ("get", "/v1/sessions/{session}/history"): ("sessions", "history"),
    ("get", "/v1/sessions/{session}/entries"): ("sessions", "entries"),
    ("post", "/v1/sessions/{session}/anchors"): ("sessions", "anchor"),
    ("post", "/v1/sessions/{session}/consolidate"): ("sessions", "consolidate"),
    ("post", "/v1/sessions/{session}/consolidation"): ("sessions", "consolidation"),
    ("post", "/v1/sessions/{session}/extraction"): ("sessions", "extraction"),
    ("post", "/v1/sessions/{session}/context"): ("sessions", "context"),
    ("post", "/v1/sessions/{session}/new"): ("sessions", "new"),
    ("post", "/v1/sessions/{session}/start"): ("sessions", "start"),
    ("get", "/v1/memory"): ("memory", "view"),
    ("get", "/v1/memory/show"): ("memory", "show"),
    ("post", "/v1/memory/save"): ("memory", "save"),
    ("post", "/v1/memory/daily"): ("memory", "daily"),
    ("get", "/v1/memory/recall"): ("memory", "recall"),
    ("get", "/v1/memory/search"): ("memory", "search"),
    ("get", "/v1/memory/versions"): ("memory", "versions"),
    ("get", "/v1/memory/diff"): ("memory", "diff"),
    ("post", "/v1/memory/undo"): ("memory", "undo"),
    ("get", "/v1/memory/blame"): ("memory", "blame"),
    ("get", "/v1/memory/file"): ("memory", "read_file"),
    ("put", "/v1/memory/file"): ("memory", "write_file"),
    ("put", "/v1/memory/flags"): ("memory", "flags"),
    ("post", "/v1/memory/forget"): ("memory", "forget"),
    ("post", "/v1/memory/prune"): ("memory", "prune"),
    ("post", "/v1/memory/clear"): ("memory", "clear"),
    ("get", "/v1/memory/dropped"): ("memory", "dropped"),
    ("post", "/v1/memory/dropped/{id}/restore"): ("memory", "restore_dropped"),
    ("post", "/v1/memory/emergence"): ("memory", "emergence"),
    ("get", "/v1/memories"): ("memories", "view"),
    ("put", "/v1/memories"): ("memories", "create"),
    ("patch", "/v1/memories"): ("memories", "edit"),
    ("delete", "/v1/memories"): ("memories", "delete"),
    ("post", "/v1/memories/rename"): ("memories", "rename"),
    ("get", "/v1/workspace/files"): ("workspace", "list"),
    ("get", "/v1/workspace/file"): ("workspace", "read"),
    ("put", "/v1/workspace/file"): ("workspace", "write"),
    ("patch", "/v1/workspace/file"): ("workspace", "edit"),
    ("get", "/v1/tools"): ("tools", "list"),
    ("post", "/v1/tools/{name}"): ("tools", "call"),
    ("post", "/v1/wal/scan"): ("wal", "scan"),
    ("post", "/v1/sessions/{session}/nodes/{node}/turns"): ("nodes", "add"),
    ("get", "/v1/sessions/{session}/nodes/{node}/history"): ("nodes", "history"),
    ("post", "/v1/sessions/{session}/nodes/{node}/clear"): ("nodes", "clear"),
    ("get", "/v1/sessions/{session}/nodes/{node}/export"): ("nodes", "export"),
    ("post", "/v1/sessions/{session}/nodes/{node}/import"): ("nodes", "import_"),
    ("post", "/v1/nodes/cleanup"): ("nodes", "cleanup"),
    ("get", "/v1/retention"): ("retention", "get"),
    ("put", "/v1/retention"): ("retention", "set"),
    ("post", "/v1/retention/run"): ("retention", "run"),
    ("post", "/v1/files"): ("files", "upload"),
    ("get", "/v1/files/{id}"): ("files", "get"),
}

RESOURCE_DOCS = {
    "agents": "The tenant's agents.",
    "entries": "Tape entries by id.",
    "sessions": "Sessions: messages, history, entries, anchors, the prompt and the lifecycle.",
    "memory": "Memory: long-term facts, daily notes, versions, diff, undo, blame, as-of.",
    "memories": "Files under /memories: Anthropic's memory tool.",
    "workspace": "The agent's workspace files (MateClaw's workspace tools).",
    "tools": "The memory tools, callable by name.",
    "wal": "The WAL scanner.",
    "retention": "Retention policies and runs.",
    "nodes": "Dify's node memory: a workflow node's turns in a conversation, in and out.",
    "files": "Uploads: files a message attaches by reference (Dify's `local_file`).",
}

# Names pydantic's BaseModel uses itself: a field of that name gets an alias.
RESERVED = {"json", "dict", "copy", "schema", "construct", "validate", "fields", "model_config"}

HEADER = '"""{doc}\n\nGenerated by sdk/python/scripts/generate.py from crates/memtape-server/openapi.json: do not\nedit; run the script after an API change."""\n'


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def py_name(name: str) -> str:
    if keyword.iskeyword(name) or name in RESERVED:
        return name + "_"
    return name.replace("-", "_")


class Types:
    """Turns JSON schemas into Python annotations."""

    def __init__(self, schemas: dict):
        self.schemas = schemas

    def annotation(self, s: dict) -> str:
        if "$ref" in s:
            return ref_name(s["$ref"])
        if "oneOf" in s or "anyOf" in s:
            parts = [self.annotation(x) for x in s.get("oneOf", s.get("anyOf"))]
            return " | ".join(dict.fromkeys(parts))
        if "allOf" in s:
            refs = [x for x in s["allOf"] if "$ref" in x]
            if len(s["allOf"]) == 1 and refs:
                return ref_name(refs[0]["$ref"])
            return "dict[str, Any]"
        if "enum" in s:
            return "Literal[" + ", ".join(json.dumps(v) for v in s["enum"]) + "]"
        t = s.get("type")
        if isinstance(t, list):
            parts = [self.annotation({**s, "type": x}) for x in t]
            return " | ".join(dict.fromkeys(parts))
        if t == "string":
            return "str"
        if t == "integer":
            return "int"
        if t == "number":
            return "float"
        if t == "boolean":
            return "bool"
        if t == "null":
            return "None"
        if t == "array":
            return "list[" + self.annotation(s.get("items", {})) + "]"
        if t == "object":
            extra = s.get("additionalProperties")
            if isinstance(extra, dict) and not s.get("properties"):
                return "dict[str, " + self.annotation(extra) + "]"
            return "dict[str, Any]"
        return "Any"

    def properties(self, s: dict) -> tuple[dict, set]:
        """The properties of an object schema (allOf merged) and the required ones."""
        if "$ref" in s:
            return self.properties(self.schemas[ref_name(s["$ref"])])
        if "allOf" in s:
            props, required = {}, set()
            for part in s["allOf"]:
                p, r = self.properties(part)
                props.update(p)
                required |= r
            return props, required
        return dict(s.get("properties", {})), set(s.get("required", []))

    def body_fields(self, s: dict) -> tuple[dict, set]:
        """A request body's fields: an object's, or every variant's of a oneOf (none then
        required, the server decides which variant was meant)."""
        if "$ref" in s:
            return self.body_fields(self.schemas[ref_name(s["$ref"])])
        if "oneOf" in s:
            props = {}
            for variant in s["oneOf"]:
                p, _ = self.body_fields(variant)
                for k, v in p.items():
                    props.setdefault(k, v)
            return props, set()
        return self.properties(s)


def doc_line(s: dict) -> str:
    text = (s.get("description") or "").strip()
    if not text:
        # `oneOf: [null, {$ref, description}]`: the description sits on the variant.
        text = next((v.get("description", "") for v in s.get("oneOf", []) if "$ref" in v), "")
    text = text.replace("\\", "\\\\").replace('"""', "'''")
    return " ".join(text.split())


def model_source(name: str, s: dict, types: Types) -> str:
    doc = doc_line(s)
    if (
        "enum" in s
        or "oneOf" in s
        or s.get("type") not in (None, "object")
        or (s.get("type") == "object" and not s.get("properties"))
    ):
        if "allOf" not in s:
            line = f"{name} = {types.annotation(s)}\n"
            return line + (f'"""{doc}"""\n' if doc else "")
    props, required = types.properties(s)
    out = [f"class {name}(_Model):"]
    out.append(f'    """{doc or name}"""\n')
    for field, fs in props.items():
        ann = types.annotation(fs)
        attr = py_name(field)
        args = []
        if field not in required:
            if "None" not in ann.split(" | "):
                ann += " | None"
            args.append("default=None")
        if attr != field:
            args.append(f"alias={field!r}")
        value = f" = Field({', '.join(args)})" if args else ""
        out.append(f"    {attr}: {ann}{value}")
        fdoc = doc_line(fs)
        if fdoc:
            out.append(f'    """{fdoc}"""')
    return "\n".join(out) + "\n"


def generate_models(spec: dict) -> str:
    schemas = spec["components"]["schemas"]
    types = Types(schemas)
    parts = [
        HEADER.format(doc="The API's request and response types, one per schema of /openapi.json."),
        "from __future__ import annotations\n",
        "from typing import Any, Literal\n",
        "from pydantic import BaseModel, ConfigDict, Field\n\n",
        "class _Model(BaseModel):",
        '    """A value the API sends: unknown fields (from a newer server) are kept."""\n',
        '    model_config = ConfigDict(extra="allow", populate_by_name=True)\n\n',
    ]
    sources = {name: model_source(name, schemas[name], types) for name in sorted(schemas)}
    classes = [n for n, src in sources.items() if src.startswith("class ")]
    parts += [sources[n] + "\n" for n in classes]
    # Aliases are evaluated at import: after the classes, each after the aliases it names.
    aliases = [n for n in sources if n not in classes]
    done: list[str] = []
    while aliases:
        ready = [
            n
            for n in aliases
            if not any(re.search(rf"\b{m}\b", sources[n].split("\n")[0]) for m in aliases if m != n)
        ]
        if not ready:
            raise SystemExit(f"type aliases that name each other: {aliases}")
        for n in ready:
            parts.append(sources[n] + "\n")
            aliases.remove(n)
            done.append(n)
    parts.append("for _m in (" + ", ".join(classes) + ",):\n    _m.model_rebuild()\n")
    parts.append("\n__all__ = " + json.dumps(sorted(schemas), indent=4) + "\n")
    return "\n".join(parts)


def operation_source(
    method: str, path: str, op: dict, name: str, types: Types, asynchronous: bool, on_client: bool
) -> str:
    params = op.get("parameters", [])
    path_params = [p for p in params if p["in"] == "path"]
    query = [p for p in params if p["in"] == "query"]
    idempotent_header = any(p["in"] == "header" and p["name"] == "Idempotency-Key" for p in params)
    body = op.get("requestBody", {}).get("content", {})
    sig = ["self"]
    for p in path_params:
        if p["name"].startswith("_"):
            raise SystemExit(f"{method} {path}: parameter {p['name']!r} would shadow a local")
        sig.append(f"{py_name(p['name'])}: {types.annotation(p['schema'])}")
    sig.append("*")
    body_kind = None
    fields: dict = {}
    required: set = set()
    if "application/json" in body:
        body_kind = "json"
        fields, required = types.body_fields(body["application/json"]["schema"])
    elif "application/x-ndjson" in body:
        body_kind = "ndjson"
        sig.append("data: str | bytes")
    elif "multipart/form-data" in body:
        body_kind = "multipart"
    seen = {p["name"] for p in params}
    kwargs = []
    if body_kind == "multipart":
        kwargs += [
            (0, "file: bytes"),
            (1, 'filename: str = "upload"'),
            (1, 'media_type: str = "application/octet-stream"'),
        ]
    for field, fs in fields.items():
        if field in seen:
            raise SystemExit(f"{method} {path}: body field {field!r} is also a parameter")
        ann = types.annotation(fs)
        if field in required:
            kwargs.append((0, f"{py_name(field)}: {ann}"))
        else:
            kwargs.append(
                (
                    1,
                    f"{py_name(field)}: {ann} | None = None"
                    if "None" not in ann.split(" | ")
                    else f"{py_name(field)}: {ann} = None",
                )
            )
    for p in query:
        if p["name"] in ("agent", "user"):
            continue
        ann = types.annotation(p["schema"])
        if p.get("required"):
            kwargs.append((0, f"{py_name(p['name'])}: {ann}"))
        else:
            kwargs.append((1, f"{py_name(p['name'])}: {ann} | None = None"))
    # Required values are positional too (`search("dark mode")`), the rest keywords only.
    sig.remove("*")
    sig += [k for o, k in kwargs if o == 0]
    sig.append("*")
    sig += [k for o, k in kwargs if o == 1]
    scoped = any(p["name"] == "agent" for p in query)
    if scoped:
        sig += ["agent: str | None = None", "user: str | None = None"]
    if idempotent_header:
        sig.append("idempotency_key: str | None = None")
    sig.append("timeout: float | None = None")
    ok = sorted(c for c in op["responses"] if c.startswith("2"))[0]
    content = op["responses"][ok].get("content", {})
    if "application/json" in content:
        returns = types.annotation(content["application/json"]["schema"])
        cast = returns
    else:
        returns, cast = "str", "str"
    lines = [f"    {'async ' if asynchronous else ''}def {name}({', '.join(sig)}) -> {returns}:"]
    doc = doc_line(op) or doc_line({"description": op.get("summary", "")}) or f"{method.upper()} {path}"
    lines.append(f'        """{doc}\n\n        `{method.upper()} {path}`."""')
    path_expr = path
    for p in path_params:
        path_expr = path_expr.replace("{" + p["name"] + "}", "{_path(" + py_name(p["name"]) + ")}")
    # Locals start with `_`: a parameter may be called `path`, `query` or `body`.
    lines.append(f"        _url = {'f' if path_params else ''}{path_expr!r}")
    q = [f"{p['name']!r}: {py_name(p['name'])}" for p in query if p["name"] not in ("agent", "user")]
    lines.append("        _query = {" + ", ".join(q) + "}")
    target = "self" if on_client else "self._client"
    if scoped:
        lines.append(f"        _query.update({target}._scope(agent, user))")
    if body_kind == "json":
        b = [f"{f!r}: {py_name(f)}" for f in fields]
        lines.append("        _body = {" + ", ".join(b) + "}")
        body_arg = "json=_body"
    elif body_kind == "ndjson":
        body_arg = "content=data"
    elif body_kind == "multipart":
        body_arg = "upload=(filename, file, media_type)"
    else:
        body_arg = "json=None" if method != "get" and method != "delete" else ""
    call_args = [repr(method.upper()), "_url", "query=_query"]
    if body_arg:
        call_args.append(body_arg)
    call_args.append(f"cast={cast}")
    if idempotent_header:
        call_args += ["idempotency_key=idempotency_key", "keyed=True"]
    call_args.append("timeout=timeout")
    await_ = "await " if asynchronous else ""
    lines.append(f"        return {await_}{target}._request({', '.join(call_args)})")
    return "\n".join(lines) + "\n"


def generate_resources(spec: dict) -> str:
    types = Types(spec["components"]["schemas"])
    ops = {}
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            if (method, path) not in OPERATIONS:
                raise SystemExit(f"{method.upper()} {path} has no name in OPERATIONS: add one")
            ops[(method, path)] = op
    for key in OPERATIONS:
        if key not in ops:
            raise SystemExit(f"OPERATIONS names {key}, which the API does not have")
    out = [
        HEADER.format(doc="The API's operations: one method per route of /openapi.json, sync and async."),
        "# ruff: noqa: F405 (the types come from the star import)\n",
        "from __future__ import annotations\n",
        "from typing import TYPE_CHECKING, Any, Literal\n",
        "from ._models import *  # noqa: F403",
        "from ._models import __all__ as _MODELS  # noqa: F401",
        "from ._paths import _path\n",
        "if TYPE_CHECKING:",
        "    from ._base import _AsyncBase, _SyncBase\n",
        "# (method, path) of every operation, as the API names them: the sync test checks it.",
        "OPERATIONS = " + json.dumps(sorted(f"{m.upper()} {p}" for m, p in OPERATIONS), indent=4) + "\n",
    ]
    resources = sorted({r for r, _ in OPERATIONS.values() if r})
    for asynchronous in (False, True):
        prefix = "Async" if asynchronous else ""
        base = "_AsyncBase" if asynchronous else "_SyncBase"
        for resource in resources:
            cls = prefix + resource.capitalize() + "Resource"
            out.append(f"\nclass {cls}:")
            out.append(f'    """{RESOURCE_DOCS[resource]}"""\n')
            out.append(f"    def __init__(self, client: {base}) -> None:")
            out.append("        self._client = client\n")
            for (method, path), (r, name) in OPERATIONS.items():
                if r == resource:
                    out.append(
                        operation_source(method, path, ops[(method, path)], name, types, asynchronous, False)
                    )
        out.append(f"\nclass {prefix}Operations:")
        out.append('    """The operations that belong to no resource, and the resources."""\n')
        for resource in resources:
            out.append(f"    {resource}: {prefix}{resource.capitalize()}Resource")
            out.append(f'    """{RESOURCE_DOCS[resource]}"""')
        out.append("")
        out.append("    def _resources(self) -> None:")
        for resource in resources:
            out.append(
                f"        self.{resource} = {prefix}{resource.capitalize()}Resource(self)  # type: ignore[arg-type]"
            )
        out.append("")
        for (method, path), (r, name) in OPERATIONS.items():
            if r is None:
                out.append(
                    operation_source(method, path, ops[(method, path)], name, types, asynchronous, True)
                )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed files are stale")
    args = parser.parse_args()
    spec = json.loads(SPEC.read_text())
    files = {
        PACKAGE / "_models.py": generate_models(spec),
        PACKAGE / "_resources.py": generate_resources(spec),
    }
    stale = []
    for path, text in files.items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.write_text(text)
    if stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(
            f"{names}: not what {SPEC.relative_to(ROOT)} generates; run {pathlib.Path(__file__).relative_to(ROOT)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
