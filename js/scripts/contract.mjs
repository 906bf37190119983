// Print the page contract as JSON: every exported interface and type alias of the given TypeScript
// files, with each field's type and optionality, read by the TypeScript compiler (not by regex).
// tests/unit/test_page_contract.py compares this with the Python TypedDicts of gradviz_nb/widgets/page.
//
//   node js/scripts/contract.mjs js/src/payload.ts [more.ts[:Name,Name]] ...
//
// A file given as "path:Traits" contributes only the named declarations (the Traits interface lives
// among widget-internal types). Types come out as small JSON trees: {k: "str"|"number"|"bool"|"null"|
// "unknown"}, {k: "literal", v}, {k: "list", of}, {k: "tuple", items}, {k: "dict", of} (Record),
// {k: "partial", of}, {k: "ref", name}, {k: "union", of}, {k: "object", fields}.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const ts = require(path.join(here, "..", "node_modules", "typescript"));

function typeOf(node) {
  const K = ts.SyntaxKind;
  switch (node.kind) {
    case K.StringKeyword: return { k: "str" };
    case K.NumberKeyword: return { k: "number" };
    case K.BooleanKeyword: return { k: "bool" };
    case K.NullKeyword: return { k: "null" };
    case K.NeverKeyword: return { k: "never" };
    case K.UnknownKeyword: case K.AnyKeyword: return { k: "unknown" };
    case K.ParenthesizedType: return typeOf(node.type);
    case K.LiteralType: {
      const lit = node.literal;
      if (lit.kind === K.NullKeyword) return { k: "null" };
      if (lit.kind === K.StringLiteral) return { k: "literal", v: [lit.text] };
      if (lit.kind === K.NumericLiteral) return { k: "literal", v: [Number(lit.text)] };
      if (lit.kind === K.TrueKeyword || lit.kind === K.FalseKeyword) return { k: "literal", v: [lit.kind === K.TrueKeyword] };
      throw new Error(`unsupported literal ${K[lit.kind]}`);
    }
    case K.ArrayType: return { k: "list", of: typeOf(node.elementType) };
    case K.TupleType: return { k: "tuple", items: node.elements.map(typeOf) };
    case K.UnionType: return { k: "union", of: node.types.map(typeOf) };
    case K.TypeLiteral: return { k: "object", fields: fieldsOf(node.members) };
    case K.TypeReference: {
      const name = node.typeName.getText();
      const args = (node.typeArguments || []).map(typeOf);
      if (name === "Array" && args.length === 1) return { k: "list", of: args[0] };
      if (name === "Record" && args.length === 2) return { k: "dict", key: args[0], of: args[1] };
      if (name === "Partial" && args.length === 1) return { k: "partial", of: args[0] };
      if (args.length) throw new Error(`unsupported generic ${name}`);
      return { k: "ref", name };
    }
    default: throw new Error(`unsupported type ${K[node.kind]}: ${node.getText()}`);
  }
}

function fieldsOf(members) {
  const out = {};
  for (const m of members) {
    if (m.kind !== ts.SyntaxKind.PropertySignature) throw new Error(`unsupported member ${m.getText()}`);
    out[m.name.getText()] = { optional: Boolean(m.questionToken), type: typeOf(m.type) };
  }
  return out;
}

function declarations(file, only) {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const out = {};
  for (const st of source.statements) {
    const exported = (st.modifiers || []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
    if (!exported || (only && !only.includes(st.name?.text))) continue;
    if (ts.isInterfaceDeclaration(st)) {
      if (st.heritageClauses?.length) throw new Error(`${st.name.text}: 'extends' is not supported`);
      out[st.name.text] = { kind: "interface", fields: fieldsOf(st.members) };
    } else if (ts.isTypeAliasDeclaration(st)) {
      out[st.name.text] = { kind: "alias", type: typeOf(st.type) };
    }
  }
  return out;
}

const result = {};
for (const arg of process.argv.slice(2)) {
  const [file, names] = arg.split(/:(?=[A-Za-z_,]+$)/);
  Object.assign(result, declarations(file, names ? names.split(",") : null));
}
process.stdout.write(JSON.stringify(result, null, 1) + "\n");
