/**
 * The public surface of the package entry (`src/index.ts`, what `import ... from "assay"` gives)
 * as data, read with the TypeScript compiler like api-extractor's report: for each namespace the
 * entry exports (`export * as X`), every name it re-exports, types included; the entry's own
 * type exports are under `"(entry)"`. A type-only name is written `type Name`.
 *
 * `publicApi.test.ts` compares it with the reviewed report `api-report.json`; after a deliberate
 * change of the public surface, regenerate that file with
 * `npx tsx test/architecture/apiReport.ts --write` and review its diff.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"

const here = path.dirname(fileURLToPath(import.meta.url))

/** The repository's root (two levels above this file). */
export const root = path.resolve(here, "../..")

/** The reviewed report, checked in beside this file. */
export const reportFile = path.join(here, "api-report.json")

/** Namespace name → its sorted public names (`type ` prefix for type-only names). */
export type ApiReport = Record<string, ReadonlyArray<string>>

const nameOf = (checker: ts.TypeChecker, s: ts.Symbol): string => {
  const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s
  return target.flags & ts.SymbolFlags.Value ? s.name : `type ${s.name}`
}

/** Reads the public surface of `src/index.ts` with the compiler (the repository's tsconfig). */
export const apiReport = (): ApiReport => {
  const entry = path.join(root, "src/index.ts")
  const config = ts.getParsedCommandLineOfConfigFile(path.join(root, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"))
    }
  })
  if (config === undefined) throw new Error("tsconfig.json not readable")
  const program = ts.createProgram([entry], { ...config.options, noEmit: true })
  const checker = program.getTypeChecker()
  const source = program.getSourceFile(entry)
  const moduleSymbol = source === undefined ? undefined : checker.getSymbolAtLocation(source)
  if (moduleSymbol === undefined) throw new Error("src/index.ts has no module symbol")
  const report: Record<string, Array<string>> = { "(entry)": [] }
  for (const s of checker.getExportsOfModule(moduleSymbol)) {
    const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s
    if (target.flags & ts.SymbolFlags.ValueModule) {
      report[s.name] = checker.getExportsOfModule(target).map((e) => nameOf(checker, e)).sort()
    } else {
      report["(entry)"]!.push(nameOf(checker, s))
    }
  }
  report["(entry)"]!.sort()
  return Object.fromEntries(Object.keys(report).sort().map((k) => [k, report[k]!]))
}

/** The report as written to {@link reportFile}: two-space JSON and a final newline. */
export const render = (report: ApiReport): string => JSON.stringify(report, null, 2) + "\n"

if (process.argv.includes("--write")) {
  fs.writeFileSync(reportFile, render(apiReport()))
  console.log(`wrote ${path.relative(root, reportFile)}`)
}
