/**
 * `assay validate -c FILE [--strict-env] [--json]`: loads and checks an experiment exactly as
 * `run` does (same loader, same errors) and prints the effective experiment: pools, tasks,
 * source, run settings and unresolved environment variables. Exit 0 when valid, 2 with every
 * problem and its field path otherwise. Never opens a store. With `--json`, prints
 * `{ "valid": true, "file": <absolute path>, ... }` or `{ "valid": false, "file", "message",
 * "issues" }`. A `jsonl` source with a `keyField` is read to check its keys (the whole file
 * under 50 MiB, else the first 100 000 rows; see `Experiment.LoadOptions.scanKeys`); every
 * `jsonl` source is read within the same bounds for integers beyond 2^53, which tasks would
 * receive rounded (a `warning:` line on stderr, `warnings` in `--json`).
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as path from "node:path"
import { Console, Effect, Either, Option, Stream } from "effect"
import type { Json } from "../domain/Json.js"
import * as Experiment from "../layers/Experiment.js"

const text = (experiment: Experiment.Experiment): string => {
  const d = experiment.describe() as Record<string, any>
  const lines: Array<string> = [`experiment ${experiment.file} (${experiment.format}): valid`]
  const p = d["pipeline"] as Record<string, any>
  lines.push(`pipeline ${p["name"]} (spec ${p["specDigest"]}, includeCode ${p["includeCode"]})`)
  // A fanout's branches are listed under it, indented one level per nesting.
  const taskLines = (tasks: Array<Record<string, any>>, depth: number) => {
    for (const t of tasks) {
      const retry = t["retry"] as Record<string, any>
      const children = (t["children"] ?? []) as Array<Record<string, any>>
      lines.push(
        `${"  ".repeat(depth + 1)}${depth === 0 ? "task" : "branch"} ${t["name"]}: resource ${t["resource"] ?? "-"}, ` +
          `algorithm ${t["algorithm"] === null ? "-" : JSON.stringify(t["algorithm"])}, ` +
          `timeout ${t["timeoutMs"] === null ? "-" : `${t["timeoutMs"]} ms`}, maxAttempts ${retry["maxAttempts"] ?? 1}` +
          (children.length > 0 ? `, ${children.length} branches` : "")
      )
      taskLines(children, depth + 1)
    }
  }
  taskLines(p["tasks"] as Array<Record<string, any>>, 0)
  for (const pool of d["pools"] as Array<Record<string, any>>) {
    lines.push(`pool ${pool["name"]}: algorithm ${JSON.stringify(pool["algorithm"])}`)
    for (const r of pool["resources"] as Array<Record<string, any>>) {
      lines.push(`  resource ${r["id"]} (${r["kind"]}), capacity ${r["capacity"]}`)
    }
  }
  lines.push(`source: ${JSON.stringify(d["source"])}`)
  const checked = d["source"]["keysChecked"] as { rows: number; wholeFile: boolean } | undefined
  if (checked !== undefined) {
    lines.push(
      checked.wholeFile
        ? `keys: all ${checked.rows} rows have a distinct ${d["source"]["keyField"]}`
        : `keys: the first ${checked.rows} rows have a distinct ${d["source"]["keyField"]} (the file is large; the run checks the rest as it reads them)`
    )
  }
  lines.push(`run: ${JSON.stringify(d["run"])}`)
  for (const pl of d["plugins"] as Array<Record<string, any>>) {
    lines.push(`plugin ${pl["specifier"]}: ${pl["error"] === null ? "ok" : `failed: ${pl["error"]}`}`)
  }
  const unresolved = d["unresolvedEnv"] as Array<{ name: string; path: string }>
  lines.push(
    unresolved.length === 0
      ? "unresolved env: none"
      : `unresolved env: ${unresolved.map((u) => `${u.name} (at ${u.path})`).join(", ")}`
  )
  return lines.join("\n")
}

/**
 * `assay validate`.
 *
 * @since 0.1.0
 * @category commands
 */
export const validate = Command.make(
  "validate",
  {
    config: Options.file("config", { exists: "either" }).pipe(
      Options.withAlias("c"),
      Options.withDescription("The experiment file (.json, .toml, .yaml/.yml or .ts).")
    ),
    strictEnv: Options.boolean("strict-env").pipe(Options.withDescription("An unset ${VAR} is an error.")),
    json: Options.boolean("json").pipe(Options.withDescription("Print the effective experiment as JSON."))
  },
  ({ config, json, strictEnv }) =>
    Effect.gen(function*() {
      // validate reads a keyed jsonl source whole (up to a size bound) to find repeated keys
      const experiment = yield* Experiment.load(config, { strictEnv, scanKeys: "full" }).pipe(
        // With --json an invalid file is also described on stdout, for tools and editors:
        // `{ "valid": false, "issues": [{ "path", "message", "suggestion"? }] }` (still exit 2).
        Effect.tapError((e) =>
          json
            ? Console.log(JSON.stringify({ valid: false, file: path.resolve(config), message: e.message, issues: e.issues }, null, 2))
            : Effect.void
        )
      )
      const described = experiment.describe() as Record<string, Json>
      // An empty source is valid but would make `run` exit 1: say so now (a source that cannot
      // be read is `run`'s to report, with its line numbers).
      const first = yield* Effect.either(Stream.runHead(experiment.seeds(1)))
      const empty = Either.isRight(first) && Option.isNone(first.right)
      yield* Console.log(
        json ? JSON.stringify({ valid: true, ...described, sourceEmpty: empty, warnings: experiment.warnings }, null, 2) : text(experiment)
      )
      // integers beyond 2^53 in the rows: tasks would receive them rounded
      for (const w of experiment.warnings) yield* Console.error(w)
      if (empty) yield* Console.error(`warning: ${Experiment.emptySourceMessage(experiment)}: \`assay run\` would exit 1 with nothing to do`)
    })
).pipe(Command.withDescription("Check an experiment file and print the effective experiment (exit 2 when invalid)."))
