/**
 * The dependency rules of `src/` (issue 12, "Dependencies point one way") as a pure checker:
 * given each file's source text, it lists every import that points the wrong way and every
 * process-wide listener (`process.on(...)` and its relatives) installed outside the signals
 * module. `imports.test.ts` runs it over the real `src/` and over synthetic inputs.
 *
 * The imports are read with the TypeScript compiler's parser (static `import`/`export ... from`,
 * `import type`, dynamic `import("...")` and `import("...")` types), not with a regular
 * expression, so comments and strings that look like imports are not counted.
 */
import * as path from "node:path"
import ts from "typescript"

/** The top-level folders of `src/` that the rules know, plus the package entry `index.ts`. */
export type Area = "domain" | "services" | "tasks" | "layers" | "config" | "cli" | "index"

/**
 * What each area may import (besides itself): cli → layers/config → tasks → services → domain.
 * `config/` sits beside `layers/` (the config compiler loads plugins, which are layers, and the
 * store resolver of `layers/` checks specs written in a config), so the two may import each
 * other; nothing below them may import either, and nothing but `index.ts` imports `cli/`.
 */
export const allowed: Readonly<Record<Area, ReadonlyArray<Area>>> = {
  domain: ["domain"],
  services: ["domain", "services"],
  tasks: ["domain", "services", "tasks"],
  layers: ["domain", "services", "tasks", "layers", "config"],
  config: ["domain", "services", "tasks", "layers", "config"],
  cli: ["domain", "services", "tasks", "layers", "config", "cli"],
  index: ["domain", "services", "tasks", "layers", "config", "cli", "index"]
}

/** The only file of `src/` allowed to install process-wide listeners (signals, exit). */
export const SIGNALS_MODULE = "src/services/Signals.ts"

/** The methods of `process` that install a listener. */
const listenerMethods = new Set(["on", "once", "addListener", "prependListener", "prependOnceListener"])

/**
 * One breach of the rules:
 * - `import`: `file` imports `target` (both `src/...` paths) against {@link allowed};
 * - `listener`: `file` calls `process.<method>(` (line 1-based) outside {@link SIGNALS_MODULE}.
 */
export type Violation =
  | { readonly kind: "import"; readonly file: string; readonly target: string }
  | { readonly kind: "listener"; readonly file: string; readonly method: string; readonly line: number }

/** The area of a `src/...` path, or `undefined` for a file outside the known folders. */
export const areaOf = (file: string): Area | undefined => {
  const parts = file.split("/")
  if (parts[0] !== "src") return undefined
  if (parts.length === 2) return parts[1] === "index.ts" ? "index" : undefined
  const top = parts[1]
  return top === "domain" || top === "services" || top === "tasks" || top === "layers" || top === "config" ||
      top === "cli"
    ? top
    : undefined
}

/** Every module specifier a file names (static, type-only and dynamic imports, re-exports). */
export const specifiersOf = (fileName: string, text: string): ReadonlyArray<string> => {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS)
  const out: Array<string> = []
  const visit = (node: ts.Node): void => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      out.push(node.moduleSpecifier.text)
    } else if (
      ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined && ts.isStringLiteralLike(node.arguments[0])
    ) {
      out.push(node.arguments[0].text)
    } else if (
      ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)
    ) {
      out.push(node.argument.literal.text)
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return out
}

/** Every `process.<listener method>(...)` call of a file, with its 1-based line. */
export const listenersOf = (fileName: string, text: string): ReadonlyArray<{ method: string; line: number }> => {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS)
  const out: Array<{ method: string; line: number }> = []
  const visit = (node: ts.Node): void => {
    if (
      ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression) &&
      ts.isIdentifier(node.expression.expression) && node.expression.expression.text === "process" &&
      listenerMethods.has(node.expression.name.text)
    ) {
      out.push({ method: node.expression.name.text, line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1 })
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return out
}

/**
 * Checks a set of files (paths relative to the checkout, `src/...`, with their text) against
 * the rules. A relative specifier is resolved against its file (`../services/Bus.js` →
 * `src/services/Bus.ts`); package specifiers (`effect`, `node:fs`) are not checked.
 */
export const check = (files: ReadonlyMap<string, string>): ReadonlyArray<Violation> => {
  const out: Array<Violation> = []
  for (const [file, text] of files) {
    const from = areaOf(file)
    for (const spec of specifiersOf(file, text)) {
      if (!spec.startsWith(".")) continue
      const target = path.posix.join(path.posix.dirname(file), spec).replace(/\.(m?js)$/, ".ts")
      const to = areaOf(target)
      if (from === undefined || to === undefined) continue
      if (!allowed[from].includes(to)) out.push({ kind: "import", file, target })
    }
    if (file !== SIGNALS_MODULE && file.startsWith("src/")) {
      for (const l of listenersOf(file, text)) out.push({ kind: "listener", file, method: l.method, line: l.line })
    }
  }
  return out
}

/**
 * The key an allowlist entry matches: `file -> target` for an import, `file: process.<method>`
 * for a listener (without the line, so an edit elsewhere in the file does not move it).
 */
export const keyOf = (v: Violation): string =>
  v.kind === "import" ? `${v.file} -> ${v.target}` : `${v.file}: process.${v.method}`

/**
 * Splits the violations by an allowlist of keys (see {@link keyOf}): `fresh` are the ones not
 * allowed (the test fails on them), `stale` the allowlist keys that match nothing any more
 * (the test fails on them too, so the list only shrinks).
 */
export const against = (
  violations: ReadonlyArray<Violation>,
  allowlist: ReadonlyArray<string>
): { readonly fresh: ReadonlyArray<Violation>; readonly stale: ReadonlyArray<string> } => {
  const allow = new Set(allowlist)
  const seen = new Set(violations.map(keyOf))
  return {
    fresh: violations.filter((v) => !allow.has(keyOf(v))),
    stale: allowlist.filter((k) => !seen.has(k))
  }
}
