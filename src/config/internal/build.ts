/**
 * @internal
 *
 * Building an experiment from its decoded sections: `use:` targets, fanout groups, pools,
 * algorithms, the source and the run settings.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Chunk, Effect, Either, Stream } from "effect"
import { type ExperimentDefinition as Definition, FANOUT } from "../Config.js"
import * as Control from "../../domain/Control.js"
import { ConfigError, type ConfigIssue, PipelineBuildError } from "../../domain/Errors.js"
import type { Json } from "../../domain/Json.js"
import type { AlgorithmInput } from "../../domain/Lease.js"
import * as Pipeline from "../../domain/Pipeline.js"
import { withEnvReferences } from "../../domain/internal/resource.js"
import { replaceValues, setShown } from "../../domain/internal/shownText.js"
import * as Resource from "../../domain/Resource.js"
import type { RetryPolicy } from "../../domain/RetryPolicy.js"
import * as RunConfig from "../../domain/RunConfig.js"
import * as Task from "../../domain/Task.js"
import { type AcquireAlgorithm, resolveAlgorithm } from "../../services/AcquireAlgorithm.js"
import * as Pool from "../../services/Pool.js"
import { builtins, builtinTaskNames } from "../../tasks/Builtins.js"
import { fanout, type FanoutOptions } from "../../tasks/Fanout.js"
import {
  jsonlKeyedRows,
  jsonlSource,
  type KeyedRow,
  rangeSource,
  scanSource,
  type SourceError,
  type SourceScan,
  unsafeIntegersWarning
} from "../../tasks/internal/sources.js"
import * as Plugins from "../../layers/internal/plugins.js"
import * as PluginUri from "../../layers/PluginUri.js"
import { resourceOptionNames as chatResourceOptions, taskOptionNames as chatTaskOptions } from "../../tasks/internal/chat.js"

import type { Experiment, Format, SourceSpec } from "../Experiment.js"
import type { Interpolation } from "./env.js"
import { closest, formatPath, issue } from "./issues.js"
import { KEY_SCAN_FULL_MAX_BYTES, KEY_SCAN_HEAD_ROWS, KEY_SCAN_LARGE_ROWS, sourceSize } from "./sources.js"

// ---------------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------------

export type TaskSection = Definition["pipeline"]["tasks"][number]

export const argPathFields = new Set(["command", "duration", "path", "message", "failTimes"])

export const taskIssuePath = (base: string, p: string): string => {
  if (p === "" ) return base
  if (p.startsWith("args") || p.startsWith("options") || p.startsWith("tasks") || p === "onError") return `${base}.${p}`
  if (argPathFields.has(p)) return `${base}.args[0]`
  // an element of the first argument (shellRun's argv: command[2] → args[0][2])
  const element = /^(\w+)(\[\d+\].*)$/.exec(p)
  if (element !== null && argPathFields.has(element[1]!)) return `${base}.args[0]${element[2]}`
  if (p === "name" || p === "retry" || p === "timeout" || p === "version" || p === "config" || p === "evaluator") {
    return `${base}.${p}`
  }
  return `${base}.options.${p}`
}

export const definitionIssues = (e: unknown, base: string): Array<ConfigIssue> => {
  if (e instanceof ConfigError) {
    return e.issues.length > 0
      ? e.issues.map((i) => ({ ...i, path: taskIssuePath(base, i.path) }))
      : [issue(base, e.message)]
  }
  if (e instanceof PipelineBuildError) return [issue(base, e.message)]
  return [issue(base, `the task could not be built: ${e instanceof Error ? e.message : String(e)}`)]
}

/** Calls `define`, turning any throw into issues under `base`. */
export const attempt = <A>(define: () => A, base: string, issues: Array<ConfigIssue>): A | undefined => {
  try {
    return define()
  } catch (e) {
    issues.push(...definitionIssues(e, base))
    return undefined
  }
}

export const algorithmIssues = (e: unknown, base: string): Array<ConfigIssue> => {
  if (e instanceof ConfigError && e.issues.length > 0) {
    return e.issues.map((i) => ({ ...i, path: i.path.replace(/^algorithm/, base) }))
  }
  return [issue(base, e instanceof Error ? e.message : String((e as { message?: unknown })?.message ?? e))]
}

/** Resolves a `use:` target to a task (or a factory's result). */
export const resolveUse = (
  section: TaskSection,
  base: string,
  baseDir: string,
  plugins: Plugins.PluginRegistry,
  issues: Array<ConfigIssue>
): Effect.Effect<Task.Any | undefined> =>
  Effect.gen(function*() {
    const use = section.use
    const args = section.args ?? []
    const options = section.options
    const instantiate = (value: unknown, what: string): Task.Any | undefined => {
      if (Task.isTask(value)) {
        if (section.args !== undefined || options !== undefined) {
          issues.push(issue(`${base}.${section.args !== undefined ? "args" : "options"}`, `${what} is a task, not a factory: it takes no args or options`))
          return undefined
        }
        return value
      }
      if (typeof value === "function") {
        const made = attempt(
          () => (value as (...a: Array<unknown>) => unknown)(...args, ...(options === undefined ? [] : [options])),
          base,
          issues
        )
        if (made === undefined) return undefined
        if (!Task.isTask(made)) {
          issues.push(issue(`${base}.use`, `${what} is a function that did not return a task`))
          return undefined
        }
        return made
      }
      issues.push(issue(`${base}.use`, `${what} is neither a task nor a task factory`))
      return undefined
    }
    if (typeof use !== "string") return instantiate(use, "the task value")
    const builtin = builtins.get(use)
    if (builtin !== undefined) return attempt(() => builtin.make(args, options, { baseDir }), base, issues)
    const hash = use.lastIndexOf("#")
    if (hash > 0 || use.startsWith(".") || path.isAbsolute(use)) {
      const spec = hash > 0 ? use.slice(0, hash) : use
      const exportName = hash > 0 ? use.slice(hash + 1) : "default"
      const mod = yield* Effect.either(Plugins.importModule(spec, baseDir))
      if (mod._tag === "Left") {
        issues.push(issue(`${base}.use`, `cannot load module "${spec}": ${mod.left}`))
        return undefined
      }
      if (!(exportName in mod.right)) {
        const near = closest(exportName, Object.keys(mod.right))
        issues.push(issue(
          `${base}.use`,
          `module "${spec}" has no export "${exportName}"`,
          near !== undefined ? `did you mean ${spec}#${near}?` : `exports: ${Object.keys(mod.right).join(", ")}`
        ))
        return undefined
      }
      return instantiate(mod.right[exportName], `"${use}"`)
    }
    const plugged = plugins.tasks.get(use)
    if (plugged !== undefined) return instantiate(plugged.value, `"${use}" (from plugin ${plugged.plugin})`)
    const builtinNames = [...new Set([FANOUT, ...builtinTaskNames])]
    const known = [...builtinNames, ...plugins.tasks.keys()]
    const near = closest(use, known)
    const broken = [...plugins.errors.entries()].map(([p, e]) => `${p} (${e})`)
    issues.push(issue(
      `${base}.use`,
      `unknown task "${use}"${broken.length > 0 ? `; plugins that failed to load: ${broken.join(", ")}` : ""}`,
      near !== undefined
        ? `did you mean ${near}?`
        : `use a built-in (${builtinNames.join(", ")}), a plugin task, "./file.ts#export" or "package#export"`
    ))
    return undefined
  })

export const overridesOf = (section: TaskSection): Task.Overrides => {
  const o: Record<string, unknown> = {}
  if (section.name !== undefined) o["name"] = section.name
  if (section.resource !== undefined) o["resource"] = section.resource
  if (section.algorithm !== undefined) o["algorithm"] = section.algorithm
  if (section.timeout !== undefined) o["timeout"] = section.timeout
  if (section.retry !== undefined) o["retry"] = section.retry as RetryPolicy
  if (section.config !== undefined) o["config"] = section.config
  if (section.version !== undefined) o["version"] = section.version
  if (section.evaluator !== undefined) o["evaluator"] = section.evaluator
  return o as Task.Overrides
}

export const resourcesOf = (task: Task.Any): Array<string> => [
  ...(task.options.resource === null ? [] : [task.options.resource]),
  ...task.children.flatMap(resourcesOf)
]

export const buildPools = (
  def: Definition,
  plugins: Plugins.PluginRegistry,
  issues: Array<ConfigIssue>,
  interpolated: ReadonlyArray<Interpolation> = []
): Array<Pool.PoolConfig> => {
  const out: Array<Pool.PoolConfig> = []
  for (const [name, p] of Object.entries(def.pools ?? {})) {
    const base = `pools.${name}`
    let algorithm: AcquireAlgorithm | undefined
    if (p.algorithm !== undefined) {
      const r = resolveAlgorithm(p.algorithm as AlgorithmInput, plugins.algorithms)
      if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `${base}.algorithm`))
      else algorithm = r.right
    }
    if (p.resources.length === 0) {
      issues.push(issue(`${base}.resources`, "a pool needs at least one resource", "add { capacity: 1 }"))
    }
    const explicitIds = new Map<string, number>()
    p.resources.forEach((r, j) => {
      if (r.id === undefined) return
      const first = explicitIds.get(r.id)
      if (first === undefined) explicitIds.set(r.id, j)
      else {
        issues.push(issue(
          `${base}.resources[${j}].id`,
          `duplicate resource id "${r.id}" in pool "${name}" (also ${base}.resources[${first}])`,
          "give each resource a distinct id, or leave id out to get a generated one"
        ))
      }
    })
    const resources = p.resources.map((r, j) => {
      // a value from `${VAR}` is shown and stored as its config text, whatever its key
      const refs = interpolated.flatMap((i) =>
        i.path.length > 5 && i.path[0] === "pools" && i.path[1] === name && i.path[2] === "resources" && i.path[3] === j &&
          i.path[4] === "options"
          ? [{ path: i.path.slice(5), template: i.template }]
          : []
      )
      const options = r.options === undefined ? undefined : withEnvReferences(r.options, refs) as Record<string, unknown>
      const res = Resource.make(r.kind ?? p.kind ?? name, {
        ...(r.id !== undefined ? { id: r.id } : {}),
        ...(options !== undefined ? { options } : {}),
        ...(r.tags !== undefined ? { tags: r.tags } : {}),
        capacity: r.capacity ?? p.capacity ?? 1,
        degradeAfter: r.degradeAfter ?? p.degradeAfter,
        deadAfter: r.deadAfter ?? p.deadAfter,
        ...(r.cooldown ?? p.cooldown) !== undefined ? { cooldown: (r.cooldown ?? p.cooldown)! } : {},
        ...(r.pricing !== undefined ? { pricing: r.pricing } : {}),
        ...(r.quotas !== undefined ? { quotas: r.quotas } : {})
      })
      issues.push(...Resource.validate(res, `${base}.resources[${j}]`))
      return res
    })
    out.push(Pool.make(name, resources, {
      kind: p.kind ?? name,
      ...(algorithm !== undefined ? { algorithm } : {}),
      ...(p.deadlockWarn !== undefined ? { deadlockWarn: p.deadlockWarn } : {})
    }))
  }
  return out
}

export const runInputOf = (def: Definition, baseDir: string): RunConfig.RunConfigInput => {
  const r = def.run ?? {}
  const out: Record<string, unknown> = { ...r }
  if (def.pricing !== undefined) out["pricing"] = def.pricing
  // a plugin URI (`vault://qa`) is not a path
  if (r.store !== undefined && r.store !== ":memory:" && !PluginUri.isUri(r.store)) out["store"] = path.resolve(baseDir, r.store)
  return out as RunConfig.RunConfigInput
}

/**
 * Reads the head (or, for `"full"`, all of a small file) of a `jsonl` source: with a
 * `keyField`, pushes the first key problem as an issue at `source.keyField`; in every row,
 * finds the integers beyond 2^53 (see `Sources.scanSource`). Returns what was read.
 */
export const scanSourceRows = (
  file: string,
  keyField: string | undefined,
  mode: "head" | "full",
  issues: Array<ConfigIssue>
): Effect.Effect<SourceScan | undefined, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    let maxRows = KEY_SCAN_HEAD_ROWS
    if (mode === "full") {
      const size = yield* Effect.orElseSucceed(Effect.map(fs.stat(file), (i) => Number(i.size)), () => Infinity)
      maxRows = size < KEY_SCAN_FULL_MAX_BYTES ? Number.MAX_SAFE_INTEGER : KEY_SCAN_LARGE_ROWS
    }
    const hint = (fields: ReadonlyArray<string>): string | undefined => {
      if (keyField === undefined) return undefined
      const near = closest(keyField, fields)
      return near === undefined ? undefined : `did you mean "${near}"?`
    }
    const scanned = yield* Effect.either(scanSource(file, { keyField, maxRows, hint }))
    if (Either.isRight(scanned)) return scanned.right
    const e = scanned.left
    if (e._tag === "ConfigError") issues.push(...e.issues)
    else if (keyField !== undefined) issues.push(issue("source.jsonl.path", e.message))
    return undefined
  })

export const sourceOf = (
  def: Definition,
  baseDir: string,
  issues: Array<ConfigIssue>,
  scanMode: "head" | "full" | "none"
): Effect.Effect<SourceSpec | undefined, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const s = def.source
    const repeats = s.repeats ?? 1
    if (s.range !== undefined && s.jsonl !== undefined) {
      issues.push(issue("source", "a source is either range or jsonl, not both"))
      return undefined
    }
    if (s.range !== undefined) {
      if (s.keyField !== undefined) {
        issues.push(issue("source.keyField", "keyField needs rows that are objects: use it with a jsonl source"))
      }
      return { kind: "range", n: s.range.n, keyField: undefined, repeats }
    }
    if (s.jsonl !== undefined) {
      const p = path.resolve(baseDir, s.jsonl.path)
      // store-only readers (study report, export, template): the data set is never read
      if (scanMode === "none") return { kind: "jsonl", path: p, limit: s.jsonl.limit, keyScan: undefined, scan: undefined, keyField: s.keyField, repeats }
      const fs = yield* FileSystem.FileSystem
      const exists = yield* Effect.orElseSucceed(fs.exists(p), () => false)
      if (!exists) issues.push(issue("source.jsonl.path", `no such file: ${p}`))
      const scan = exists ? yield* scanSourceRows(p, s.keyField, scanMode, issues) : undefined
      const keyScan = scan !== undefined && s.keyField !== undefined ? { rows: scan.rows, complete: scan.complete } : undefined
      return { kind: "jsonl", path: p, limit: s.jsonl.limit, keyScan, scan, keyField: s.keyField, repeats }
    }
    issues.push(issue("source", "a source needs range or jsonl", "source: { range: { n: 10 } }"))
    return undefined
  })

export const suggestPool = (name: string, pools: ReadonlyArray<string>): string => {
  const near = closest(name, pools)
  return near !== undefined
    ? `did you mean ${near}?`
    : pools.length > 0
    ? `pools: ${pools.join(", ")}`
    : `declare it under pools.${name}`
}

export const describeAlgorithm = (a: unknown): Json =>
  a === undefined ? null : (JSON.parse(JSON.stringify(a)) as Json)

/** What {@link buildEntry} needs besides the entry. */
export interface EntryContext {
  readonly baseDir: string
  readonly plugins: Plugins.PluginRegistry
  readonly poolNames: ReadonlyArray<string>
  readonly pipelineResource: string | undefined
}

/** How an entry's `use:` reads in a message: `"echo"` or `the task value "ask"`. */
export const useLabel = (use: TaskSection["use"]): string =>
  typeof use === "string" ? `"${use}"` : `the task value "${use.name}"`

/**
 * Refuses `tasks` / `onError` on an entry that is not `use: fanout`. Returns whether the
 * entry is clean.
 */
export const fanoutKeysOnlyOnFanout = (section: TaskSection, base: string, issues: Array<ConfigIssue>): boolean => {
  let clean = true
  if (section.tasks !== undefined) {
    clean = false
    issues.push(issue(
      `${base}.tasks`,
      `only a "use: ${FANOUT}" entry takes nested tasks; ${useLabel(section.use)} is not a fanout`,
      `to run these tasks concurrently on the same input, write use: ${FANOUT} here and put ${useLabel(section.use)} among the nested tasks`
    ))
  }
  if (section.onError !== undefined) {
    clean = false
    issues.push(issue(
      `${base}.onError`,
      `only a "use: ${FANOUT}" entry takes onError; ${useLabel(section.use)} is not a fanout`,
      "remove it, or make this entry a fanout"
    ))
  }
  return clean
}

/**
 * Builds a `use: fanout` entry: each nested entry with {@link buildEntry} (paths
 * `<base>.tasks[j]`), then `fanout(...branches, { name, onError, retry, version, config })`
 * exactly as a TypeScript program would call it (so both give the same identity), then the
 * entry's `resource`, `algorithm` and `timeout` as overrides of the group.
 */
export const buildFanout = (
  section: TaskSection,
  base: string,
  ctx: EntryContext,
  issues: Array<ConfigIssue>
): Effect.Effect<Task.Any | undefined, never, never> =>
  Effect.gen(function*() {
    let ok = true
    for (const key of ["args", "options"] as const) {
      if (section[key] !== undefined) {
        ok = false
        issues.push(issue(
          `${base}.${key}`,
          `${FANOUT} takes no ${key}: its branches are the entries under tasks, its settings are fields of this entry`,
          "onError: collect, retry: { maxAttempts: 3 }, tasks: [{ use: echo, name: a }, ...]"
        ))
      }
    }
    if (section.tasks === undefined) {
      issues.push(issue(
        `${base}.tasks`,
        `is missing: a ${FANOUT} runs the task entries listed under tasks`,
        "tasks: [{ use: echo, name: a }, { use: echo, name: b }]"
      ))
      return undefined
    }
    const children: Array<Task.Any> = []
    for (let j = 0; j < section.tasks.length; j++) {
      const child = yield* buildEntry(section.tasks[j]!, `${base}.tasks[${j}]`, ctx, issues)
      if (child === undefined) ok = false
      else children.push(child)
    }
    if (!ok) return undefined
    const seen = new Map<string, number>()
    children.forEach((c, j) => {
      const previous = seen.get(c.name)
      if (previous === undefined) {
        seen.set(c.name, j)
        return
      }
      ok = false
      issues.push(issue(
        `${base}.tasks[${j}]${section.tasks![j]!.name !== undefined ? ".name" : ""}`,
        `duplicate branch name "${c.name}" (also ${base}.tasks[${previous}]): a fanout returns its branches' values by name`,
        "give each branch a distinct name: name: ..."
      ))
    })
    if (!ok) return undefined
    const options: FanoutOptions = {
      ...(section.name !== undefined ? { name: section.name } : {}),
      ...(section.onError !== undefined ? { onError: section.onError } : {}),
      ...(section.retry !== undefined ? { retry: section.retry as RetryPolicy } : {}),
      ...(section.version !== undefined ? { version: section.version } : {}),
      ...(section.config !== undefined ? { config: section.config as Task.JsonObject } : {})
    }
    const group = attempt(
      () => (fanout as (...args: ReadonlyArray<unknown>) => Task.Any)(...children, options),
      base,
      issues
    )
    if (group === undefined) return undefined
    const overrides: Record<string, unknown> = {}
    if (section.resource !== undefined) overrides["resource"] = section.resource
    if (section.algorithm !== undefined) overrides["algorithm"] = section.algorithm
    if (section.timeout !== undefined) overrides["timeout"] = section.timeout
    if (section.evaluator !== undefined) overrides["evaluator"] = section.evaluator
    if (Object.keys(overrides).length === 0) return group
    return attempt(() => Task.withOverrides(group, overrides as Task.Overrides), base, issues)
  })

/**
 * Builds one task entry at `base` (`pipeline.tasks[1]`, `pipeline.tasks[1].tasks[0]`):
 * resolves `use:` (or builds a fanout from its nested `tasks`), applies the entry's
 * overrides, gives a task without a resource `pipeline.resource` (a fanout group takes its
 * resource from its branches, which got the default themselves), and checks its pools and
 * algorithm. Every problem is pushed to `issues` with its full path; `undefined` when the
 * entry could not be built.
 */
export const buildEntry = (
  section: TaskSection,
  base: string,
  ctx: EntryContext,
  issues: Array<ConfigIssue>
): Effect.Effect<Task.Any | undefined, never, never> =>
  Effect.gen(function*() {
    const poolNames = ctx.poolNames
    const isFanout = section.use === FANOUT
    if (isFanout) {
      const group = yield* buildFanout(section, base, ctx, issues)
      if (group === undefined) return undefined
      if (section.resource !== undefined && section.resource !== null && !poolNames.includes(section.resource)) {
        issues.push(issue(`${base}.resource`, `no pool named "${section.resource}"`, suggestPool(section.resource, poolNames)))
      }
      if (section.algorithm !== undefined && section.algorithm !== null) {
        const r = resolveAlgorithm(section.algorithm as AlgorithmInput, ctx.plugins.algorithms)
        if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `${base}.algorithm`))
      }
      return group
    }
    const clean = fanoutKeysOnlyOnFanout(section, base, issues)
    if (section.use === "judge" && section.evaluator === false) {
      issues.push(issue(
        `${base}.evaluator`,
        "the judge is always an evaluator: it runs blind to the variant (its score must not depend on it)",
        "remove evaluator: false"
      ))
      return undefined
    }
    let task = yield* resolveUse(section, base, ctx.baseDir, ctx.plugins, issues)
    if (task === undefined) return undefined
    const t0 = task
    task = attempt(() => Task.withOverrides(t0, overridesOf(section)), base, issues)
    if (task === undefined) return undefined
    if (task.options.resource === null && section.resource === undefined && ctx.pipelineResource !== undefined) {
      const t1 = task
      task = attempt(() => Task.withOverrides(t1, { resource: ctx.pipelineResource! }), base, issues)
      if (task === undefined) return undefined
    }
    for (const r of resourcesOf(task)) {
      if (!poolNames.includes(r)) {
        const own = section.resource === undefined && ctx.pipelineResource !== r
        const near = closest(r, poolNames)
        issues.push(issue(
          section.resource !== undefined ? `${base}.resource` : own ? `${base}.use` : "pipeline.resource",
          own
            ? `no pool named "${r}": task "${task.name}" declares it as its resource`
            : `no pool named "${r}"`,
          near !== undefined
            ? `did you mean ${near}?`
            : poolNames.length > 0
            ? `pools: ${poolNames.join(", ")}`
            : `declare it under pools.${r}`
        ))
      }
    }
    if (task.options.algorithmInstance === null && task.options.algorithm !== null) {
      const r = resolveAlgorithm(task.options.algorithm as AlgorithmInput, ctx.plugins.algorithms)
      if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `${base}.algorithm`))
    }
    return clean ? task : undefined
  })

/** Semantic checks and construction from a decoded definition. */
export const build = (
  def: Definition,
  ctx: {
    readonly file: string
    readonly format: Format
    readonly baseDir: string
    readonly plugins: Plugins.PluginRegistry
    readonly unresolved: ReadonlyArray<{ name: string; path: string }>
    /** The strings that took a value from the environment (shown and stored as written). */
    readonly interpolated?: ReadonlyArray<Interpolation> | undefined
    readonly scanKeys: "head" | "full" | "none"
  },
  issues: Array<ConfigIssue>
): Effect.Effect<Experiment | undefined, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const poolNames = Object.keys(def.pools ?? {})
    const before = issues.length
    const pools = buildPools(def, ctx.plugins, issues, ctx.interpolated)
    if (!issues.slice(before).some((i) => i.path.startsWith("pools"))) {
      // Backstop: whatever else the pool service would refuse at run time is refused here
      // (quota windows are accepted: the file may be meant for the cluster engine, whose
      // global pools enforce them; the embedded engine refuses them when it builds its pools).
      const made = yield* Effect.either(Effect.scoped(Pool.makePools(pools, { plugins: ctx.plugins.algorithms, globalQuotas: true })))
      if (Either.isLeft(made)) issues.push(...made.left.issues)
    }
    const entryCtx: EntryContext = {
      baseDir: ctx.baseDir,
      plugins: ctx.plugins,
      poolNames,
      pipelineResource: def.pipeline.resource
    }
    const tasks: Array<Task.Any> = []
    let allBuilt = true
    for (let i = 0; i < def.pipeline.tasks.length; i++) {
      const task = yield* buildEntry(def.pipeline.tasks[i]!, `pipeline.tasks[${i}]`, entryCtx, issues)
      if (task === undefined) allBuilt = false
      else tasks.push(showEnvTexts(task, envTextsUnder(def, ["pipeline", "tasks", i], ctx.interpolated ?? [])))
    }
    const source = yield* sourceOf(def, ctx.baseDir, issues, ctx.scanKeys)
    const run = runInputOf(def, ctx.baseDir)
    const resolvedRun = RunConfig.resolve(run)
    if (Either.isLeft(resolvedRun)) issues.push(...resolvedRun.left.issues)
    if (!allBuilt || tasks.length === 0) return undefined
    let control: Control.ResolvedControl | undefined
    if (def.pipeline.control !== undefined) {
      // names and seqs resolve against the built chain; each problem at its own field path
      const resolved = Control.resolve(tasks.map((t) => t.name), def.pipeline.control)
      if (Either.isLeft(resolved)) {
        // a misspelt key of the block (`rewinds`, `maxHandoff`) was reported with its did-you-mean
        // and left out of the decoded block: what its absence makes Control say is no second problem
        const stray = issues.filter((i) => /^pipeline\.control\.[^.[]+$/.test(i.path) && i.message.startsWith("unknown key"))
        const knockOn = (i: Control.ControlIssue): boolean =>
          stray.length > 0 && (
            (i.path.length === 0 && i.message.startsWith("control declares no operation")) ||
            (i.path.length === 1 && i.path[0] === "maxHandoffs" && (
              i.message.startsWith("maxHandoffs requires backward operations") ||
              (i.message.startsWith("maxHandoffs is required") && stray.some((s) => s.suggestion?.includes("maxHandoffs") === true))
            ))
          )
        // a fanout's branch named as a source or target: say what it is (a branch never hands off)
        const fanoutOf = new Map<string, string>()
        for (const t of tasks) for (const c of t.children) if (!fanoutOf.has(c.name)) fanoutOf.set(c.name, t.name)
        for (const i of resolved.left) {
          if (knockOn(i)) continue
          const ref = /^unknown task "(.*)" \(the tasks are/.exec(i.message)?.[1]
          const group = ref === undefined ? undefined : fanoutOf.get(ref)
          if (group !== undefined) {
            issues.push(issue(
              formatPath(["pipeline", "control", ...i.path]),
              `"${ref}" is a branch of the fanout "${group}", not a task of the chain: branches cannot hand off or be ` +
                `handed to (control addresses the fanout "${group}" as a whole)`
            ))
            continue
          }
          issues.push(issue(formatPath(["pipeline", "control", ...i.path]), i.message, i.suggestion))
        }
        return undefined
      }
      control = resolved.right
    }
    const options: Pipeline.MakeOptions = {
      ...(def.pipeline.tags !== undefined ? { tags: def.pipeline.tags as Task.JsonObject } : {}),
      ...(def.pipeline.includeCode !== undefined ? { includeCode: def.pipeline.includeCode } : {}),
      ...(control !== undefined ? { control: def.pipeline.control as Control.ControlDecl } : {})
    }
    const template = attempt(
      () => (Pipeline.make as unknown as (name: string, ...args: Array<unknown>) => Pipeline.AnyTemplate)(def.pipeline.name, options, ...tasks),
      "pipeline",
      issues
    )
    if (template === undefined || source === undefined || Either.isLeft(resolvedRun)) return undefined

    const seeds = (limit?: number): Stream.Stream<unknown, SourceError | ConfigError, FileSystem.FileSystem> => {
      const all: Stream.Stream<unknown, SourceError | ConfigError, FileSystem.FileSystem> = source.kind === "range"
        ? rangeSource(limit === undefined ? source.n : Math.min(limit, source.n))
        : jsonlSource(source.path, {
          limit: limit === undefined ? source.limit : Math.min(limit, source.limit ?? limit),
          // rows without a key and repeated keys fail the stream (ConfigError, exit 2)
          keyField: source.keyField
        })
      return all
    }
    const keyField = source.keyField
    // A keyed jsonl source keys each row as its line writes the key (an integer beyond 2^53
    // is not rounded), so its pipelines are bound from the keyed rows; `template.map` would
    // only see the parsed (rounded) row.
    const keyedPipelines = (
      file: string,
      rows: Stream.Stream<KeyedRow, SourceError | ConfigError, FileSystem.FileSystem>
    ): Stream.Stream<Pipeline.PipelineSpec<any, any, any, any>, SourceError | ConfigError | Pipeline.SeedError, FileSystem.FileSystem> =>
      Stream.mapChunksEffect(rows, (chunk) =>
        Effect.suspend(() => {
          const out: Array<Pipeline.PipelineSpec<any, any, any, any>> = []
          for (const r of chunk) {
            for (let repeat = 0; repeat < source.repeats; repeat++) {
              try {
                out.push(template.bind(r.value, { key: source.repeats > 1 ? `${r.key}#${repeat}` : r.key, repeat }))
              } catch (e) {
                const reason = e instanceof Error ? e.message : String(e)
                return Effect.fail(new Pipeline.SeedError({ message: `row ${r.row} (line ${r.line}) of ${path.basename(file)}: ${reason}`, index: r.row - 1 }))
              }
            }
          }
          return Effect.succeed(Chunk.unsafeFromArray(out))
        }))
    const pipelines = (limit?: number) =>
      source.kind === "jsonl" && keyField !== undefined
        ? keyedPipelines(source.path, jsonlKeyedRows(source.path, {
          limit: limit === undefined ? source.limit : Math.min(limit, source.limit ?? limit),
          keyField
        }))
        : template.map(seeds(limit), { repeats: source.repeats })
    const warnings = [
      ...(source.kind === "jsonl" && source.scan !== undefined
        ? [unsafeIntegersWarning(source.path, source.scan, keyField)].filter((w): w is string => w !== undefined)
        : []),
      ...unpricedModelWarnings(def, ctx.interpolated ?? []),
      ...unknownChatOptionWarnings(def, template.tasks as ReadonlyArray<Task.Any>)
    ]
    // the shared call cache file, resolved, with its text as written (a `${VAR}` shown as such)
    const cacheDbOf = (): Experiment["cacheDb"] => {
      const cache = def.run?.cache
      const db = typeof cache === "object" && cache !== null ? (cache as { readonly db?: unknown }).db : undefined
      if (typeof db !== "string" || db === "") return undefined
      const written = (ctx.interpolated ?? []).find((i) => i.path.length === 3 && i.path[0] === "run" && i.path[1] === "cache" && i.path[2] === "db")
      return { path: path.resolve(ctx.baseDir, db), written: written?.template ?? db }
    }
    const cacheDb = cacheDbOf()
    const experiment: Experiment = {
      ...(cacheDb === undefined ? {} : { cacheDb }),
      file: ctx.file,
      format: ctx.format,
      baseDir: ctx.baseDir,
      definition: def,
      template,
      pools,
      source,
      run,
      plugins: ctx.plugins,
      unresolvedEnv: ctx.unresolved,
      seeds,
      pipelines,
      warnings,
      size: (limit) => sourceSize(source, limit),
      describe: () => ({
        file: ctx.file,
        format: ctx.format,
        pipeline: template.describe(),
        pools: pools.map((p) => ({
          name: p.name,
          algorithm: describeAlgorithm(def.pools?.[p.name]?.algorithm ?? "wait"),
          resources: p.resources.map((r) => Resource.spec(r))
        })),
        source: source.kind === "range"
          ? { kind: "range", n: source.n, keyField: null, repeats: source.repeats }
          : {
            kind: "jsonl",
            path: source.path,
            limit: source.limit ?? null,
            keyField: source.keyField ?? null,
            repeats: source.repeats,
            ...(source.keyScan !== undefined ? { keysChecked: { rows: source.keyScan.rows, wholeFile: source.keyScan.complete } } : {}),
            ...(source.scan !== undefined && source.scan.unsafeRows > 0
              ? {
                unsafeIntegers: {
                  rows: source.scan.unsafeRows,
                  first: source.scan.unsafeIntegers.map((u) => ({ ...u }))
                }
              }
              : {})
          },
        // the top-level `pricing` at its own level, as written (not inside `run`)
        run: withoutPricing(JSON.parse(JSON.stringify(RunConfig.toJson(resolvedRun.right))) as Json),
        ...(def.pricing !== undefined ? { pricing: JSON.parse(JSON.stringify(def.pricing)) as Json } : {}),
        plugins: ctx.plugins.plugins.map((p) => ({ ...p })) as unknown as Json,
        unresolvedEnv: ctx.unresolved.map((u) => ({ ...u }))
      })
    }
    return experiment
  })

/** A run's JSON without its `pricing` (the experiment's top-level table, described apart). */
const withoutPricing = (run: Json): Json => {
  if (run === null || typeof run !== "object" || Array.isArray(run)) return run
  const { pricing: _, ...rest } = run as { readonly [k: string]: Json }
  return rest
}

/**
 * The strings under `at` in the (expanded) definition that took a value from `${VAR}`: each
 * value as the config holds it now, mapped to its text as written (`"${API_TOKEN}"`).
 */
const envTextsUnder = (
  def: Definition,
  at: ReadonlyArray<PropertyKey>,
  interpolated: ReadonlyArray<Interpolation>
): Map<string, string> => {
  const out = new Map<string, string>()
  for (const i of interpolated) {
    if (i.path.length <= at.length || at.some((k, n) => i.path[n] !== k)) continue
    let v: unknown = def
    for (const k of i.path) v = v !== null && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[k] : undefined
    if (typeof v === "string" && v !== "" && v !== i.template) out.set(v, i.template)
  }
  return out
}

/**
 * `task` (and its children) recorded to show, in `parameters` and `config`, the config text of
 * each value in `texts` in place of the value (issue 18: a task option from `${VAR}` was shown
 * and stored verbatim by `validate --json` and a study's stored protocol). The task itself
 * keeps the values (and its identity digest).
 */
const showEnvTexts = (task: Task.Any, texts: ReadonlyMap<string, string>): Task.Any => {
  if (texts.size === 0) return task
  for (const c of task.children) showEnvTexts(c, texts)
  const parameters = replaceValues(task.parameters, texts)
  const config = replaceValues(task.options.config as Json, texts)
  return setShown(task, {
    parameters: parameters === task.parameters ? undefined : parameters,
    config: config === task.options.config ? undefined : config
  })
}

/** The tasks that talk to a chat endpoint through the resource they lease (`chat`, `judge`). */
const CHAT_ENDPOINT_TASKS: ReadonlySet<string> = new Set(["assay.chat/v1", "assay.judge/v1"])

/**
 * One `warning:` line per option key of a pool resource that a `chat` (or `judge`) task leases
 * and that such a task does not read (issue 18): resource options are free-form by design,
 * but a chat endpoint reads only `baseUrl`, `apiKey`, `apiKeyEnv`, `model` and `headers` (and
 * their other spellings, see `Chat.resourceOptionNames`), so `maxTokns: 5` there does nothing
 * silently. Not warned: `quota` (what `quotaAware` reads) and the keys a leasing task's
 * `selector.options` matches on. The line names the field path
 * (`pools.llm.resources[1].options.maxTokns`) and the task, with a did-you-mean among the
 * resource options, else among the chat task's own options (a task option put on the
 * resource). Resources that no chat task leases are not looked at.
 */
export const unknownChatOptionWarnings = (def: Definition, tasks: ReadonlyArray<Task.Any>): Array<string> => {
  // pool → the first chat task leasing it, and the option keys the leasing tasks select on
  const leased = new Map<string, { readonly task: string; readonly selected: Set<string> }>()
  const visit = (ts: ReadonlyArray<Task.Any>) => {
    for (const t of ts) {
      if (t.options.resource !== null && CHAT_ENDPOINT_TASKS.has(t.codeDigest)) {
        const entry = leased.get(t.options.resource) ?? { task: t.name, selected: new Set<string>() }
        const selector = (t.parameters as { readonly selector?: { readonly options?: unknown } } | null)?.selector
        if (selector?.options !== null && typeof selector?.options === "object") {
          for (const k of Object.keys(selector.options)) entry.selected.add(k.split(".")[0]!)
        }
        leased.set(t.options.resource, entry)
      }
      visit(t.children)
    }
  }
  visit(tasks)
  const out: Array<string> = []
  for (const [name, { selected, task }] of leased) {
    const pool = def.pools?.[name]
    if (pool === undefined) continue
    pool.resources.forEach((r, i) => {
      for (const key of Object.keys(r.options ?? {})) {
        if (chatResourceOptions.includes(key) || key === "quota" || selected.has(key)) continue
        const near = closest(key, chatResourceOptions)
        const asTask = near === undefined ? (chatTaskOptions.includes(key) ? key : closest(key, chatTaskOptions)) : undefined
        const hint = key === "pricing"
          ? `; a resource's price table is its own \`pricing\` (pools.${name}.resources[${i}].pricing), beside options, or the top-level \`pricing\``
          : near !== undefined
          ? `; did you mean ${near}?`
          : asTask === key
          ? `; ${key} is an option of the chat task: set it in the task's options, not the resource's`
          : asTask !== undefined
          ? `; did you mean ${asTask}? (an option of the chat task, set in its options, not the resource's)`
          : ""
        out.push(
          `warning: pools.${name}.resources[${i}].options.${key}: unknown option of a resource the chat task "${task}" leases: ` +
            `it reads only baseUrl, apiKey, apiKeyEnv, model and headers, so this one does nothing${hint}`
        )
      }
    })
  }
  return out
}

/** The models the tasks of a definition name (`options.model`), by the pool they lease from. */
const taskModelsByPool = (def: Definition): Map<string, Set<string>> => {
  const out = new Map<string, Set<string>>()
  const visit = (entries: ReadonlyArray<unknown>, inherited: string | undefined) => {
    for (const e of entries) {
      if (e === null || typeof e !== "object") continue
      const entry = e as { readonly resource?: unknown; readonly options?: unknown; readonly tasks?: unknown }
      const pool = typeof entry.resource === "string" ? entry.resource : inherited
      const model = entry.options !== null && typeof entry.options === "object"
        ? (entry.options as Record<string, unknown>)["model"]
        : undefined
      if (typeof model === "string" && model !== "") {
        const key = pool ?? "llm"
        out.set(key, (out.get(key) ?? new Set()).add(model))
      }
      if (Array.isArray(entry.tasks)) visit(entry.tasks, pool)
    }
  }
  visit(def.pipeline.tasks as ReadonlyArray<unknown>, def.pipeline.resource)
  return out
}

/**
 * One `warning:` line per pool resource whose model has no price while the experiment prices
 * model calls (a top-level `pricing` table, or a resource's own table): its calls would be
 * counted as unpriced (`cost unpriced (N attempts)`). The model in use is the one the tasks
 * leasing from the pool name (`options.model`), else the resource's `options.model`; a
 * resource with a single price of its own prices every model. The line names the resource,
 * the model and the priced models; a model given by a `${VAR}` (`interpolated`) is shown
 * resolved with its text as written (`"gpt-4o" (written ${MODEL})`).
 *
 * When a priced name that no model in use is called is close to the unpriced model (a typo in
 * the pricing key, tester18f F6), the line is written at that key instead, and suggests fixing
 * the key, not the model: `pricing.mock-spam1: no model in use is called "mock-spam1"; did you
 * mean "mock-spam-1" (the model of pools.llm.resources[0] (steady))? Until then, calls of
 * "mock-spam-1" count as unpriced.` (the key of a resource's own table is
 * `pools.<pool>.resources[<i>].pricing.<key>`); one line per key and model, naming every
 * resource that uses the model. Empty when nothing is priced at all (costs may then come from
 * what the servers report).
 */
export const unpricedModelWarnings = (def: Definition, interpolated: ReadonlyArray<Interpolation> = []): Array<string> => {
  const written = new Map<string, string>()
  for (const i of interpolated) {
    if (i.path[i.path.length - 1] !== "model") continue
    let v: unknown = def
    for (const k of i.path) v = v !== null && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[k] : undefined
    if (typeof v === "string" && v !== i.template) written.set(v, i.template)
  }
  const shown = (model: string) => written.has(model) ? `"${model}" (written ${written.get(model)})` : `"${model}"`
  const table = def.pricing !== undefined ? Object.keys(def.pricing) : []
  const pools = Object.entries(def.pools ?? {})
  const ownTable = (pricing: unknown): Array<string> | "all" | undefined =>
    pricing === undefined || pricing === null || typeof pricing !== "object"
      ? undefined
      : "inputPer1M" in pricing || "outputPer1M" in pricing
      ? "all"
      : Object.keys(pricing)
  const anyPricing = table.length > 0 || pools.some(([, p]) => p.resources.some((r) => ownTable(r.pricing) !== undefined))
  if (!anyPricing) return []
  const byPool = taskModelsByPool(def)
  const modelsOf = (name: string, r: { readonly options?: Readonly<Record<string, unknown>> | undefined }): Set<string> => {
    const resourceModel = r.options?.["model"]
    return byPool.get(name) ?? new Set(typeof resourceModel === "string" && resourceModel !== "" ? [resourceModel] : [])
  }
  // every model in use: a priced name among them is no typo, whatever it is close to
  const inUse = new Set<string>()
  for (const [name, pool] of pools) for (const r of pool.resources) for (const m of modelsOf(name, r)) inUse.add(m)
  const out: Array<string> = []
  // near misses by pricing key and model: the resources that use the model
  const atKey = new Map<string, { readonly key: string; readonly near: string; readonly model: string; readonly where: Array<string> }>()
  for (const [name, pool] of pools) {
    pool.resources.forEach((r, i) => {
      const own = ownTable(r.pricing)
      if (own === "all") return
      const priced = Array.from(new Set([...(own ?? []), ...table]))
      const where = `pools.${name}.resources[${i}] (${r.id})`
      for (const model of modelsOf(name, r)) {
        if (priced.includes(model)) continue
        const near = closest(model, priced.filter((k) => !inUse.has(k)))
        if (near !== undefined) {
          // the key as written: the resource's own table first (it is read first)
          const key = own !== undefined && own.includes(near)
            ? `pools.${name}.resources[${i}].pricing.${near}`
            : `pricing.${near}`
          const k = `${key}\u0000${model}`
          const entry = atKey.get(k)
          if (entry === undefined) atKey.set(k, { key, near, model, where: [where] })
          else entry.where.push(where)
          continue
        }
        out.push(
          `warning: ${where}: model ${shown(model)} has no price, so its calls will count as unpriced (priced: ${
            priced.length === 0 ? "none" : priced.map((m) => `"${m}"`).join(", ")
          })`
        )
      }
    })
  }
  for (const { key, model, near, where } of atKey.values()) {
    out.push(
      `warning: ${key}: no model in use is called "${near}"; did you mean "${model}" (the model of ${
        where.join(", ")
      })? Until then, calls of ${shown(model)} count as unpriced.`
    )
  }
  return out
}

