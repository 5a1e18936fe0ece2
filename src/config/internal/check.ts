/**
 * @internal
 *
 * The whole check of a raw experiment: env expansion, the strict Schema decode (and a repaired
 * decode so that cross-reference checks still run), building, and one `ConfigError` with every
 * problem.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Effect, Either, Option, ParseResult, Schema } from "effect"
import { ExperimentDefinition, type ExperimentDefinition as Definition, ExperimentFile, FANOUT } from "../Config.js"
import { ConfigError, type ConfigIssue } from "../../domain/Errors.js"
import type { AlgorithmInput } from "../../domain/Lease.js"
import * as Task from "../../domain/Task.js"
import { resolveAlgorithm } from "../../services/AcquireAlgorithm.js"
import * as Chat from "../../tasks/internal/chat.js"
import * as Plugins from "../../layers/Plugins.js"
import * as StoreResolver from "../../layers/internal/storeResolver.js"

import type { Experiment, Format, LoadOptions } from "../Experiment.js"
import {
  algorithmIssues,
  build,
  fanoutKeysOnlyOnFanout,
  resolveUse,
  resourcesOf,
  suggestPool,
  type TaskSection
} from "./build.js"
import { expandEnv, hidingEnvValues, type Interpolation, unsetInlineKeysAsEnv } from "./env.js"
import { unboundRefIssues } from "./refs.js"
import {
  decodeIssues,
  failWith,
  formatPath,
  isEmptyTaskList,
  isFanoutEntry,
  isRecord,
  issue,
  valueAt
} from "./issues.js"

/** A copy of the plain objects and arrays of a parsed file (task values and functions shared). */
export const cloneShape = (v: unknown): unknown => {
  if (Array.isArray(v)) return v.map(cloneShape)
  if (isRecord(v) && !Task.isTask(v)) {
    const proto = Object.getPrototypeOf(v)
    if (proto !== Object.prototype && proto !== null) return v
    const out: Record<string, unknown> = {}
    for (const [k, x] of Object.entries(v)) out[k] = cloneShape(x)
    return out
  }
  return v
}

export const PLACEHOLDER = "assay-placeholder"

/** Stand-ins for a missing required field, by key, so that the rest can still be built. */
export const fillers: Record<string, () => unknown> = {
  name: () => PLACEHOLDER,
  resources: () => [],
  path: () => "",
  n: () => 0,
  use: () => "echo",
  tasks: () => [{ use: "echo", name: PLACEHOLDER }],
  pipeline: () => ({ name: PLACEHOLDER, tasks: [{ use: "echo", name: PLACEHOLDER }] }),
  source: () => ({ range: { n: 0 } })
}

/**
 * When the Schema refuses a file, repairs a copy so that the checks of everything else can
 * still run: a required key misspelt (`strictIssues` names it, `unknown key "pipelin"` with its
 * did-you-mean) is read under the key it misspells, a value of the wrong type is removed (a task entry or resource of the wrong type
 * becomes a harmless stand-in), a missing required field gets a stand-in, an empty task list
 * gets one stand-in task. Repeats up to 8 rounds. Returns the decoded repaired definition and
 * the paths that were repaired (problems found at or under them were already reported by the
 * Schema and are dropped) and the missing keys a misspelt one stood for (their `is missing` is
 * the unknown key's problem), or `undefined` when the file cannot be repaired that way.
 */
export const repairedDecode = (
  input: unknown,
  schema: Schema.Schema<Definition, unknown>,
  strictIssues: ReadonlyArray<ConfigIssue> = []
): { readonly def: Definition; readonly repaired: ReadonlyArray<string>; readonly renamed: ReadonlyArray<string> } | undefined => {
  const copy = cloneShape(input)
  if (!isRecord(copy)) return undefined
  const repaired: Array<string> = []
  const renamed: Array<string> = []
  const decode = Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "ignore" })
  for (let round = 0; round < 8; round++) {
    const r = decode(copy)
    if (Either.isRight(r)) return { def: r.right, repaired, renamed }
    for (const i of ParseResult.ArrayFormatter.formatErrorSync(r.left)) {
      if (i.path.length === 0) return undefined
      const parentPath = i.path.slice(0, -1)
      const last = i.path[i.path.length - 1]!
      const parent = valueAt(copy, parentPath)
      // a required key misspelt (`pipelin:`): the strict decode named the unknown key and its
      // did-you-mean; read it under the key it misspells, so that what it holds is checked too
      const misspelt = i._tag === "Missing" && isRecord(parent) && typeof last === "string"
        ? strictIssues.find((j) =>
          j.message.startsWith("unknown key") && j.suggestion === `did you mean ${last}?` &&
          j.path === formatPath([...parentPath, String(j.path.split(".").at(-1))])
        )
        : undefined
      const stray = misspelt === undefined ? undefined : /^unknown key "(.*)"$/.exec(misspelt.message)?.[1]
      if (stray !== undefined && isRecord(parent) && typeof last === "string" && stray in parent) {
        parent[last] = parent[stray]
        delete parent[stray]
        renamed.push(formatPath(i.path))
      } else if (i._tag === "Missing" && isEmptyTaskList(i.path) && Array.isArray(parent)) {
        parent.push({ use: "echo", name: PLACEHOLDER })
        // a non-fanout entry's `tasks: []` stays visible to the loader ("only a fanout ...")
        if (i.path.length <= 3 || isFanoutEntry(valueAt(copy, i.path.slice(0, -2)))) repaired.push(formatPath(parentPath))
      } else if (i._tag === "Missing" && isRecord(parent) && typeof last === "string" && fillers[last] !== undefined) {
        parent[last] = fillers[last]()
        repaired.push(formatPath(i.path))
      } else if (i._tag === "Unexpected" && isRecord(parent) && typeof last === "string") {
        delete parent[last]
      } else if (isRecord(parent) && typeof last === "string") {
        delete parent[last]
        repaired.push(formatPath(i.path))
        // a record emptied by the repair (`edges: { validate: report }`): "is empty" there
        // would be a knock-on of the problem just reported
        if (Object.keys(parent).length === 0 && parentPath.length > 0) repaired.push(formatPath(parentPath))
      } else if (Array.isArray(parent) && typeof last === "number" && (parentPath.at(-1) === "tasks" || parentPath.at(-1) === "resources")) {
        parent[last] = parentPath.at(-1) === "tasks" ? { use: "echo", name: `${PLACEHOLDER}-${last}` } : {}
        repaired.push(formatPath(i.path))
      } else return undefined
    }
  }
  return undefined
}

/** Whether `p` is `root` or a path under it (`root.x`, `root[0]`). */
export const isUnder = (p: string, root: string): boolean =>
  p === root || p.startsWith(`${root}.`) || p.startsWith(`${root}[`)

export const check = (
  raw: unknown,
  ctx: {
    readonly file: string
    readonly format: Format
    readonly baseDir: string
    readonly literalIssues?: ReadonlyArray<ConfigIssue> | undefined
  },
  options: LoadOptions
): Effect.Effect<Experiment, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const issues: Array<ConfigIssue> = []
    const unresolved: Array<{ name: string; path: string }> = []
    const emptyEnv: Array<{ name: string; path: string }> = []
    // a study's protocol with its variables unbound
    issues.push(...unboundRefIssues(raw))
    const interpolated: Array<Interpolation> = []
    const expanded = expandEnv(raw, options.env ?? process.env, unresolved, [], emptyEnv, interpolated)
    if (options.strictEnv === true) {
      for (const u of unresolved) {
        issues.push(issue(u.path, `environment variable ${u.name} is not set (--strict-env)`, `export ${u.name}=... or write \${${u.name}:-default}`))
      }
      for (const u of emptyEnv) {
        issues.push(issue(u.path, `environment variable ${u.name} is set but empty (--strict-env)`, `export ${u.name}=... with a value, or write \${${u.name}:-default}`))
      }
    }
    // an inline key naming an unset variable is an unset key variable (tester18g F5): nothing
    // is sent without it (under --strict-env refused above, as any unset variable)
    const inlineKeys = options.strictEnv === true ? [] : unsetInlineKeysAsEnv(expanded, unresolved)
    const schema = (ctx.format === "module" ? ExperimentDefinition : ExperimentFile) as unknown as Schema.Schema<Definition, unknown>
    const strict = Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "error" })(expanded)
    if (Either.isLeft(strict)) issues.push(...decodeIssues(strict.left, expanded))
    issues.push(...(ctx.literalIssues ?? []))
    const lenient = Either.isRight(strict)
      ? strict
      : Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "ignore" })(expanded)
    const specifiers = Either.isRight(lenient)
      ? lenient.right.plugins ?? []
      : isRecord(expanded) && Array.isArray(expanded["plugins"])
      ? expanded["plugins"].filter((p): p is string => typeof p === "string")
      : []
    const plugins = specifiers.length === 0 ? Plugins.empty : yield* Plugins.load(specifiers, ctx.baseDir)
    // The store and artifact backend specs resolve against built-ins and these plugins'
    // schemes: `validate` refuses what `run` would.
    const rawRun = isRecord(expanded) && isRecord(expanded["run"]) ? expanded["run"] : undefined
    issues.push(...Option.toArray(StoreResolver.checkStoreSpec(rawRun?.["store"], plugins)))
    issues.push(...Option.getOrElse(StoreResolver.checkArtifactBackendSpec(rawRun?.["artifactBackend"], plugins), () => []))
    const rawPools = isRecord(expanded) && isRecord(expanded["pools"])
      ? expanded["pools"]
      : isRecord(expanded) && expanded["pools"] === undefined
      ? {}
      : undefined
    let experiment: Experiment | undefined
    const repair = Either.isRight(lenient) ? undefined : repairedDecode(expanded, schema, issues)
    if (Either.isRight(lenient)) {
      experiment = yield* build(lenient.right, { ...ctx, plugins, unresolved, interpolated, scanKeys: options.scanKeys ?? "head" }, issues)
    } else if (repair !== undefined) {
      // The Schema refused the file, but a repaired copy decodes: run every other check on
      // it, dropping what it finds where the Schema already complained.
      const more: Array<ConfigIssue> = []
      yield* build(repair.def, { ...ctx, plugins, unresolved, interpolated, scanKeys: options.scanKeys ?? "head" }, more)
      // a required key read from its misspelling is not "missing" too: the unknown key says it
      for (let k = issues.length - 1; k >= 0; k--) {
        if (issues[k]!.message === "is missing" && repair.renamed.includes(issues[k]!.path)) issues.splice(k, 1)
      }
      issues.push(...more.filter((i) => !repair.repaired.some((r) => isUnder(i.path, r))))
    } else if (isRecord(expanded) && isRecord(expanded["pipeline"]) && Array.isArray(expanded["pipeline"]["tasks"])) {
      // The shape is too broken to build; still check every `use:` (nested fanout entries
      // too) so that all problems show at once.
      const visit = (tasks: ReadonlyArray<unknown>, at: string): Effect.Effect<void> =>
        Effect.gen(function*() {
          for (let i = 0; i < tasks.length; i++) {
            const t = tasks[i]
            const base = `${at}[${i}]`
            if (!isRecord(t)) continue
            if (t["use"] === FANOUT) {
              if (Array.isArray(t["tasks"])) yield* visit(t["tasks"], `${base}.tasks`)
              continue
            }
            if (typeof t["use"] !== "string" && !Task.isTask(t["use"])) continue
            fanoutKeysOnlyOnFanout(t as TaskSection, base, issues)
            const section = {
              use: t["use"],
              ...(Array.isArray(t["args"]) ? { args: t["args"] } : {}),
              ...(isRecord(t["options"]) ? { options: t["options"] } : {})
            } as TaskSection
            const task = yield* resolveUse(section, base, ctx.baseDir, plugins, issues)
            const own = task === undefined ? [] : resourcesOf(task)
            const declared = typeof t["resource"] === "string" ? [t["resource"]] : []
            for (const r of [...own, ...declared]) {
              if (rawPools !== undefined && !(r in rawPools)) {
                issues.push(issue(
                  declared.includes(r) ? `${base}.resource` : `${base}.use`,
                  `no pool named "${r}"`,
                  suggestPool(r, Object.keys(rawPools))
                ))
              }
            }
          }
        })
      yield* visit(expanded["pipeline"]["tasks"] as Array<unknown>, "pipeline.tasks")
    }
    if (Either.isLeft(lenient) && repair === undefined && isRecord(expanded)) {
      for (const [name, p] of Object.entries(rawPools ?? {})) {
        if (!isRecord(p) || p["algorithm"] === undefined) continue
        const r = resolveAlgorithm(p["algorithm"] as AlgorithmInput, plugins.algorithms)
        if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `pools.${name}.algorithm`))
      }
      const src = expanded["source"]
      if (isRecord(src) && isRecord(src["jsonl"]) && typeof src["jsonl"]["path"] === "string") {
        const p = path.resolve(ctx.baseDir, src["jsonl"]["path"])
        const fs = yield* FileSystem.FileSystem
        if (!(yield* Effect.orElseSucceed(fs.exists(p), () => false))) issues.push(issue("source.jsonl.path", `no such file: ${p}`))
      }
    }
    // Credentials (one walk over the pools' resources): a key with a trailing newline, an
    // unset key variable under --strict-env, …; without --strict-env an unset key variable is
    // not refused, but every call would fail: a warning
    const env = options.env ?? process.env
    // one warning per unset key variable, naming every resource that reads it (tester16b N9)
    const unsetKeys = new Map<string, Array<string>>()
    for (const [name, p] of Object.entries(rawPools ?? {})) {
      if (!isRecord(p) || !Array.isArray(p["resources"])) continue
      p["resources"].forEach((r: unknown, j: number) => {
        if (!isRecord(r) || !isRecord(r["options"])) return
        const at = `pools.${name}.resources[${j}].options`
        issues.push(...Chat.credentialIssues(r["options"], at, env, options.strictEnv === true))
        if (options.strictEnv === true) return
        for (const k of ["apiKeyEnv", "api_key_env"]) {
          const v = r["options"][k]
          if (typeof v !== "string" || !Chat.isEnvName(v) || (env[v] ?? "") !== "") continue
          // an inline `apiKey: "${VAR}"` is named where it was written
          const inline = inlineKeys.find((i) => i.path.startsWith(`${at}.`))
          unsetKeys.set(v, [...(unsetKeys.get(v) ?? []), inline?.path ?? `${at}.${k}`])
        }
      })
    }
    const keyWarnings = [...unsetKeys].map(([v, places]) =>
      `warning: ${places.length === 1 ? places[0] : places.join(", ")}: environment variable ${v} (the key) is ${
        env[v] === undefined ? "not set" : "empty"
      }: every call to ${places.length === 1 ? "this resource" : `these ${places.length} resources`} will fail (export ${v}=...; --strict-env refuses it)`
    )
    if (issues.length > 0 || experiment === undefined) {
      const shown = issues.map(hidingEnvValues(interpolated, options.env ?? process.env))
      return yield* failWith(ctx.file, shown.length > 0 ? shown : [issue("", "the experiment could not be built")])
    }
    return keyWarnings.length === 0 ? experiment : { ...experiment, warnings: [...experiment.warnings, ...keyWarnings] }
  })


