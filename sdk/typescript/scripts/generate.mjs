#!/usr/bin/env node
// Generates the client's types from the server's OpenAPI document, so they cannot drift
// from the API: src/types.ts (a type per component schema) and src/operations.ts (per
// operation: its path, query, body and response types, and the facts the client needs at
// run time). No dependencies: plain Node.
//
//   node scripts/generate.mjs            write both files
//   node scripts/generate.mjs --check    exit 1 if the committed files differ from a fresh
//                                        generation (the tests run this)
//   --spec FILE                          another document (default: the server's,
//                                        ../../crates/memtape-server/openapi.json)

import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const DEFAULT_SPEC = join(root, '..', '..', 'crates', 'memtape-server', 'openapi.json');

// An object schema that does not say `additionalProperties` allows other properties in JSON
// Schema; TypeScript types are closed by convention (an object literal with an unknown
// property is an error, which catches typos). These schemas are open on purpose, their
// other properties being their point: a content part carries the fields its `type` has
// (`text`, `image_url`, `file`, ...).
const OPEN_SCHEMAS = new Set(['ContentPart']);

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

/** The header every write takes; the client sends it, it is no query parameter. */
const IDEMPOTENCY_HEADER = 'Idempotency-Key';

/** A JSDoc block for `text` at `indent`, or nothing when there is no text. */
function doc(text, indent = '') {
  if (!text || !String(text).trim()) return '';
  const lines = String(text).trim().replace(/\*\//g, '*\\/').split('\n');
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => `${indent} *${l ? ` ${l}` : ''}`).join('\n')}\n${indent} */\n`;
}

/**
 * A schema's description; for a union or an intersection without one (`oneOf: [null,
 * {$ref, description}]`, as the document writes an optional reference), its members'.
 */
function describe(schema) {
  if (!schema || typeof schema !== 'object') return undefined;
  if (schema.description) return schema.description;
  const members = schema.oneOf ?? schema.anyOf ?? schema.allOf ?? [];
  return members.map(describe).find(Boolean);
}

/** A property name as TypeScript needs it (quoted when it is not an identifier). */
function key(name) {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) ? name : JSON.stringify(name);
}

/** The last segment of a local `$ref`. */
function refName(ref) {
  const prefix = '#/components/schemas/';
  if (!ref.startsWith(prefix)) throw new Error(`unsupported $ref ${ref}`);
  return ref.slice(prefix.length);
}

/** Whether `type` needs parentheses inside a union, an intersection or an array. */
function compound(type) {
  let depth = 0;
  for (let i = 0; i < type.length; i++) {
    const c = type[i];
    if (c === '{' || c === '(' || c === '<' || c === '[') depth++;
    else if (c === '}' || c === ')' || c === '>' || c === ']') depth--;
    else if (depth === 0 && (c === '|' || c === '&')) return true;
  }
  return false;
}

function wrap(type) {
  return compound(type) ? `(${type})` : type;
}

/** `a | b`, each member once, in order, `null` last. */
function union(types) {
  const seen = [...new Set(types)].sort((a, b) => (a === 'null') - (b === 'null'));
  return seen.length === 1 ? seen[0] : seen.map(wrap).join(' | ');
}

/**
 * The TypeScript type of a schema. `ctx.ref(name)` spells a reference to a component
 * schema; `ctx.name` is the component being written (for OPEN_SCHEMAS); `indent` is the
 * indentation of the line the type starts on.
 */
function tsType(schema, ctx, indent = '') {
  if (schema === true || schema === undefined || schema === null) return 'unknown';
  if (schema === false) return 'never';
  if (schema.$ref) return ctx.ref(refName(schema.$ref));
  if (schema.nullable === true) {
    // OpenAPI 3.0's spelling of `type: [..., "null"]`.
    const { nullable, ...rest } = schema;
    return union([tsType(rest, ctx, indent), 'null']);
  }
  if (schema.oneOf || schema.anyOf) {
    return union((schema.oneOf ?? schema.anyOf).map((s) => tsType(s, { ...ctx, name: undefined }, indent)));
  }
  if (schema.allOf) {
    const parts = schema.allOf.map((s) => tsType(s, { ...ctx, name: undefined }, indent));
    return parts.length === 1 ? parts[0] : parts.map(wrap).join(' & ');
  }
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.enum) return union(schema.enum.map((v) => JSON.stringify(v)));
  if (Array.isArray(schema.type)) {
    return union(schema.type.map((t) => tsType({ ...schema, type: t }, ctx, indent)));
  }
  switch (schema.type) {
    case 'null':
      return 'null';
    case 'string':
      return 'string';
    case 'integer':
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'array': {
      const item = tsType(schema.items, { ...ctx, name: undefined }, indent);
      return /^[A-Za-z0-9_.$]+$/.test(item) ? `${item}[]` : `Array<${item}>`;
    }
    case 'object':
    case undefined:
      if (schema.type === undefined && !schema.properties && schema.additionalProperties === undefined) {
        return 'unknown';
      }
      return objectType(schema, ctx, indent);
    default:
      throw new Error(`unsupported schema type ${JSON.stringify(schema.type)}`);
  }
}

/** The members of an object type (without braces), each line at `indent`. */
function members(schema, ctx, indent) {
  const required = new Set(schema.required ?? []);
  let out = '';
  for (const [name, prop] of Object.entries(schema.properties ?? {})) {
    out += doc(describe(prop), indent);
    const optional = required.has(name) ? '' : '?';
    out += `${indent}${key(name)}${optional}: ${tsType(prop, { ...ctx, name: undefined }, indent)};\n`;
  }
  const extra = schema.additionalProperties;
  const hasProps = Object.keys(schema.properties ?? {}).length > 0;
  if (extra && extra !== true) {
    out += `${indent}[key: string]: ${tsType(extra, { ...ctx, name: undefined }, indent)};\n`;
  } else if (extra === true || !hasProps || (extra === undefined && OPEN_SCHEMAS.has(ctx.name))) {
    if (extra !== false) out += `${indent}[key: string]: unknown;\n`;
  }
  return out;
}

function objectType(schema, ctx, indent) {
  const body = members(schema, ctx, `${indent}  `);
  if (!body) return 'Record<string, never>';
  if (body === `${indent}  [key: string]: unknown;\n`) return '{ [key: string]: unknown }';
  return `{\n${body}${indent}}`;
}

/** Whether a component is written as an interface (a plain object with properties). */
function isInterface(schema) {
  return (
    (schema.type === 'object' || (schema.type === undefined && schema.properties)) &&
    !schema.oneOf &&
    !schema.anyOf &&
    !schema.allOf &&
    Object.keys(schema.properties ?? {}).length > 0
  );
}

const HEADER = (spec, specPath, what) =>
  `// Generated by scripts/generate.mjs from ${specPath} (${spec.info.title} ${spec.info.version}):
// ${what}. Do not edit: change the server, then run \`npm run generate\`.
`;

/** src/types.ts: a type per component schema, in the document's order. */
export function generateTypes(spec, specPath) {
  const ctx = { ref: (name) => name };
  let out = HEADER(spec, specPath, 'a type for each of its component schemas');
  for (const [name, schema] of Object.entries(spec.components?.schemas ?? {})) {
    out += '\n';
    out += doc(schema.description);
    if (isInterface(schema)) {
      out += `export interface ${name} {\n${members(schema, { ...ctx, name }, '  ')}}\n`;
    } else if (schema.oneOf || schema.anyOf) {
      // A union on a line per member, each with its description.
      out += `export type ${name} =\n`;
      for (const member of schema.oneOf ?? schema.anyOf) {
        out += doc(describe(member), '  ');
        out += `  | ${tsType(member, ctx, '  ')}\n`;
      }
      out = `${out.trimEnd()};\n`;
    } else {
      out += `export type ${name} = ${tsType(schema, { ...ctx, name })};\n`;
    }
  }
  return out;
}

/** Every operation of the document, in its order: `{ key, method, path, op }`. */
export function operationsOf(spec) {
  const ops = [];
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const parameters = [...(item.parameters ?? []), ...(op.parameters ?? [])].map((p) =>
        p.$ref ? spec.components.parameters[p.$ref.split('/').pop()] : p,
      );
      ops.push({ key: `${method.toUpperCase()} ${path}`, method: method.toUpperCase(), path, op, parameters });
    }
  }
  return ops;
}

/** The type of a group of parameters (path or query) as an object type. */
function paramsType(params, ctx, indent) {
  // `{}`: none (an intersection with `{}` adds nothing, where `Record<string, never>` would
  // make every other property `never`).
  if (params.length === 0) return '{}';
  let out = '{\n';
  for (const p of params) {
    const description = p.description ?? describe(p.schema);
    out += doc(description, `${indent}  `);
    out += `${indent}  ${key(p.name)}${p.required ? '' : '?'}: ${tsType(p.schema, ctx, `${indent}  `)};\n`;
  }
  return `${out}${indent}}`;
}

/** The media type and schema of a request body or of the first 2xx response. */
function content(c) {
  const entries = Object.entries(c ?? {});
  if (entries.length === 0) return undefined;
  if (entries.length > 1) throw new Error(`several media types: ${entries.map(([t]) => t).join(', ')}`);
  const [type, { schema }] = entries[0];
  return { type, schema };
}

/** src/operations.ts: each operation's types (`Operations`) and run-time facts (`operations`). */
export function generateOperations(spec, specPath) {
  const ctx = { ref: (name) => `S.${name}` };
  let types = '';
  let table = '';
  for (const { key: opKey, method, path, op, parameters } of operationsOf(spec)) {
    const pathParams = parameters.filter((p) => p.in === 'path');
    const query = parameters.filter((p) => p.in === 'query');
    const headers = parameters.filter((p) => p.in === 'header');
    for (const h of headers) {
      if (h.name !== IDEMPOTENCY_HEADER) throw new Error(`${opKey}: unknown header parameter ${h.name}`);
    }
    const body = content(op.requestBody?.content);
    const okStatus = Object.keys(op.responses ?? {}).filter((s) => /^2/.test(s)).sort()[0];
    if (!okStatus) throw new Error(`${opKey}: no 2xx response`);
    const response = content(op.responses[okStatus].content);
    const json = (t) => t === 'application/json';

    types += doc([op.summary, op.description].filter(Boolean).join('\n\n'), '  ');
    types += `  ${JSON.stringify(opKey)}: {\n`;
    types += `    path: ${paramsType(pathParams, ctx, '    ')};\n`;
    types += `    query: ${paramsType(query, ctx, '    ')};\n`;
    types += `    body: ${body ? tsType(body.schema, ctx, '    ') : 'never'};\n`;
    types += `    response: ${response ? tsType(response.schema, ctx, '    ') : 'void'};\n`;
    types += '  };\n';

    const info = {
      method,
      path,
      operationId: op.operationId ?? '',
      pathParams: pathParams.map((p) => p.name),
      query: query.map((p) => p.name),
      scoped: ['agent', 'user'].every((n) => query.some((p) => p.name === n)),
      idempotencyKey: headers.some((h) => h.name === IDEMPOTENCY_HEADER),
      body: body ? body.type : null,
      bodyRequired: Boolean(op.requestBody?.required),
      status: Number(okStatus),
      response: response ? (json(response.type) ? 'json' : 'text') : 'none',
    };
    const lit = (v) => (Array.isArray(v) ? `[${v.map(lit).join(', ')}]` : JSON.stringify(v));
    const fields = Object.entries(info).map(([k, v]) => `${k}: ${lit(v)}`);
    table += `  ${JSON.stringify(opKey)}: { ${fields.join(', ')} },\n`;
  }
  let out = HEADER(spec, specPath, "each of its operations, by method and path");
  out += `\nimport type * as S from './types.js';\n`;
  out += `\n/** Each operation's path and query parameters, request body and answer, by \`METHOD /path\`. */\n`;
  out += `export interface Operations {\n${types}}\n`;
  out += `\n/** An operation, as \`METHOD /path\`. */\nexport type OperationKey = keyof Operations;\n`;
  out += `
/** What the client needs to know of an operation at run time. */
export interface OperationInfo {
  readonly method: 'GET' | 'PUT' | 'POST' | 'DELETE' | 'PATCH' | 'HEAD' | 'OPTIONS';
  /** The path, with \`{name}\` for each path parameter. */
  readonly path: string;
  readonly operationId: string;
  readonly pathParams: readonly string[];
  /** The query parameters it takes. */
  readonly query: readonly string[];
  /** Whether it takes \`agent\` and \`user\` (the scope). */
  readonly scoped: boolean;
  /** Whether it takes an \`Idempotency-Key\` header. */
  readonly idempotencyKey: boolean;
  /** The request body's media type, if it has a body. */
  readonly body: 'application/json' | 'application/x-ndjson' | 'multipart/form-data' | null;
  readonly bodyRequired: boolean;
  /** The status of its success. */
  readonly status: number;
  /** How its success answers: JSON, text (JSONL) or nothing. */
  readonly response: 'json' | 'text' | 'none';
}
`;
  out += `\n/** Every operation of the API, in the document's order. */\n`;
  out += `export const operations = {\n${table}} as const satisfies Record<OperationKey, OperationInfo>;\n`;
  return out;
}

/** Both files, by their path relative to the package root. */
export function generate(spec, specPath) {
  return {
    'src/types.ts': generateTypes(spec, specPath),
    'src/operations.ts': generateOperations(spec, specPath),
  };
}

function main(argv) {
  const check = argv.includes('--check');
  const i = argv.indexOf('--spec');
  const specFile = i >= 0 ? argv[i + 1] : DEFAULT_SPEC;
  const spec = JSON.parse(readFileSync(specFile, 'utf8'));
  // The path the header names is the default document's, relative to the repository, so
  // the output does not depend on where the repository is checked out.
  const shown = i >= 0 ? specFile : 'crates/memtape-server/openapi.json';
  const files = generate(spec, shown);
  let stale = [];
  for (const [file, text] of Object.entries(files)) {
    const target = join(root, file);
    let current;
    try {
      current = readFileSync(target, 'utf8');
    } catch {
      current = undefined;
    }
    if (current === text) continue;
    if (check) stale.push(file);
    else writeFileSync(target, text);
  }
  if (stale.length > 0) {
    console.error(
      `${stale.join(' and ')} differ from a fresh generation from ${shown}: run \`npm run generate\` in sdk/typescript and commit the result`,
    );
    process.exit(1);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2));
}
