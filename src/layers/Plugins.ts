/**
 * Plugins: modules (a local file or an npm package) that contribute tasks, acquire
 * algorithms and codecs under names a config file can use.
 *
 * A plugin module exports `tasks` (name → task or task factory), `algorithms` (name →
 * `AlgorithmPlugin`) and `codecs` (an array of `Codec`), either as named exports or on its
 * default export (`export default definePlugin({ ... })`). Built-in names always win: a plugin
 * entry named like a built-in is ignored (and listed as shadowed). A plugin that fails to
 * load is recorded with its error and never breaks anything that does not use it.
 *
 * @since 0.1.0
 */
import { createRequire } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { Effect } from "effect"
import type { Codec } from "../domain/Codec.js"
import type * as Task from "../domain/Task.js"
import { isTask } from "../domain/Task.js"
import { type AlgorithmPlugin, builtinNames as builtinAlgorithms } from "../services/AcquireAlgorithm.js"
import { builtins } from "../tasks/Builtins.js"

/**
 * What a plugin module provides (every field optional).
 *
 * @since 0.1.0
 * @category models
 */
export interface PluginDefinition {
  readonly name?: string | undefined
  readonly tasks?: Readonly<Record<string, Task.Any | ((...args: Array<any>) => Task.Any)>> | undefined
  readonly algorithms?: Readonly<Record<string, AlgorithmPlugin>> | undefined
  readonly codecs?: ReadonlyArray<Codec> | undefined
}

/**
 * Types a plugin module's default export: `export default definePlugin({ tasks: { ... } })`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const definePlugin = (definition: PluginDefinition): PluginDefinition => definition

/**
 * One plugin as loaded: the `specifier` as written, its `name`, the task / algorithm names
 * it provides, how many codecs, names ignored because a built-in has them (`shadowed`), and
 * `error` (`null` when it loaded).
 *
 * @since 0.1.0
 * @category models
 */
export interface LoadedPlugin {
  readonly specifier: string
  readonly name: string
  readonly tasks: ReadonlyArray<string>
  readonly algorithms: ReadonlyArray<string>
  readonly codecs: number
  readonly shadowed: ReadonlyArray<string>
  readonly error: string | null
}

/**
 * Every plugin loaded for one config, and what they provide (built-ins excluded):
 * - `plugins`: each plugin with its status;
 * - `tasks`: task name → the task or factory and the plugin it came from;
 * - `algorithms`: name → algorithm plugin (for `resolveAlgorithm`);
 * - `codecs`: every codec, in plugin order;
 * - `errors`: plugin specifier → load error.
 *
 * @since 0.1.0
 * @category models
 */
export interface PluginRegistry {
  readonly plugins: ReadonlyArray<LoadedPlugin>
  readonly tasks: ReadonlyMap<string, { readonly plugin: string; readonly value: unknown }>
  readonly algorithms: ReadonlyMap<string, AlgorithmPlugin>
  readonly codecs: ReadonlyArray<Codec>
  readonly errors: ReadonlyMap<string, string>
}

/**
 * A registry with no plugin.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty: PluginRegistry = { plugins: [], tasks: new Map(), algorithms: new Map(), codecs: [], errors: new Map() }

/**
 * The URL or specifier to `import()` for a module written in a config file: a path starting
 * with `.` or `/` is resolved against `baseDir` (the config file's directory); a package name
 * is resolved from `baseDir` when possible, else left to Node's own resolution.
 *
 * @since 0.1.0
 * @category loading
 */
export const moduleUrl = (specifier: string, baseDir: string): string => {
  if (specifier.startsWith(".") || path.isAbsolute(specifier)) {
    return pathToFileURL(path.resolve(baseDir, specifier)).href
  }
  try {
    return pathToFileURL(createRequire(path.join(baseDir, "__assay__.js")).resolve(specifier)).href
  } catch {
    return specifier
  }
}

/**
 * Imports a module (TypeScript modules load through tsx's loader, registered by the CLI).
 * Fails with the import error's message.
 *
 * @since 0.1.0
 * @category loading
 */
export const importModule = (specifier: string, baseDir: string): Effect.Effect<Record<string, unknown>, string> =>
  Effect.tryPromise({
    try: () => import(moduleUrl(specifier, baseDir)) as Promise<Record<string, unknown>>,
    catch: (e) => e instanceof Error ? e.message.split("\n")[0]! : String(e)
  })

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const definitionOf = (mod: Record<string, unknown>): PluginDefinition => {
  const d = mod["default"]
  const source = isRecord(d) && ("tasks" in d || "algorithms" in d || "codecs" in d) ? d : mod
  return source as PluginDefinition
}

/**
 * Loads the plugins named in a config (`specifiers`, resolved against `baseDir`). Never
 * fails: a plugin that cannot be imported, or whose exports have the wrong shape, is kept in
 * `plugins` with its `error` and in `errors`. Built-in task and algorithm names are skipped
 * (built-ins always win); between plugins, the first one listed wins.
 *
 * @since 0.1.0
 * @category loading
 */
export const load = (specifiers: ReadonlyArray<string>, baseDir: string): Effect.Effect<PluginRegistry> =>
  Effect.gen(function*() {
    const plugins: Array<LoadedPlugin> = []
    const tasks = new Map<string, { plugin: string; value: unknown }>()
    const algorithms = new Map<string, AlgorithmPlugin>()
    const codecs: Array<Codec> = []
    const errors = new Map<string, string>()
    for (const specifier of specifiers) {
      const mod = yield* Effect.either(importModule(specifier, baseDir))
      if (mod._tag === "Left") {
        errors.set(specifier, mod.left)
        plugins.push({ specifier, name: specifier, tasks: [], algorithms: [], codecs: 0, shadowed: [], error: mod.left })
        continue
      }
      const def = definitionOf(mod.right)
      const problems: Array<string> = []
      const shadowed: Array<string> = []
      const taskNames: Array<string> = []
      const algoNames: Array<string> = []
      if (def.tasks !== undefined && !isRecord(def.tasks)) problems.push("`tasks` must be an object of name → task")
      for (const [name, value] of Object.entries(isRecord(def.tasks) ? def.tasks : {})) {
        if (!isTask(value) && typeof value !== "function") {
          problems.push(`tasks.${name} is neither a task nor a factory`)
          continue
        }
        if (builtins.has(name)) {
          shadowed.push(name)
          continue
        }
        taskNames.push(name)
        if (!tasks.has(name)) tasks.set(name, { plugin: specifier, value })
      }
      if (def.algorithms !== undefined && !isRecord(def.algorithms)) problems.push("`algorithms` must be an object")
      for (const [name, value] of Object.entries(isRecord(def.algorithms) ? def.algorithms : {})) {
        if (typeof value !== "function") {
          problems.push(`algorithms.${name} is not a function`)
          continue
        }
        if (builtinAlgorithms.includes(name)) {
          shadowed.push(name)
          continue
        }
        algoNames.push(name)
        if (!algorithms.has(name)) algorithms.set(name, value as AlgorithmPlugin)
      }
      const cs = def.codecs === undefined ? [] : Array.isArray(def.codecs) ? def.codecs : null
      if (cs === null) problems.push("`codecs` must be an array")
      else codecs.push(...cs)
      const error = problems.length === 0 ? null : problems.join("; ")
      if (error !== null) errors.set(specifier, error)
      plugins.push({
        specifier,
        name: typeof def.name === "string" ? def.name : specifier,
        tasks: taskNames,
        algorithms: algoNames,
        codecs: cs?.length ?? 0,
        shadowed,
        error
      })
    }
    return { plugins, tasks, algorithms, codecs, errors }
  })
