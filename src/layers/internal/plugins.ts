/**
 * Plugins: modules (a local file or an npm package) that contribute tasks, acquire
 * algorithms and codecs under names a config file can use.
 *
 * A plugin module exports `tasks` (name → task or task factory), `algorithms` (name →
 * `AlgorithmPlugin`), `codecs` (an array of `Codec`), `stores` (URI scheme → {@link StoreFactory})
 * and `artifactBackends` (URI scheme → {@link ArtifactBackendFactory}), either as named exports
 * or on its default export (`export default definePlugin({ ... })`). Built-in names always
 * win: a plugin entry named like a built-in (a built-in task or algorithm, or the `file`
 * scheme) is ignored (and listed as shadowed). A plugin that fails to load is recorded with
 * its error and never breaks anything that does not use it.
 *
 * @since 0.1.0
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import type { Layer } from "effect"
import { Effect } from "effect"
import type { Codec } from "../../domain/Codec.js"
import type { ConfigError, PluginError, StoreUnavailable } from "../../domain/Errors.js"
import type * as Task from "../../domain/Task.js"
import { isTask } from "../../domain/Task.js"
import { type AlgorithmPlugin, builtinNames as builtinAlgorithms } from "../../services/AcquireAlgorithm.js"
import type { ArtifactBackend } from "../../services/ArtifactBackend.js"
import type { Store } from "../../services/Store.js"
import { ModuleLoader } from "../ModuleLoader.js"

/**
 * What a store factory is told besides the URI.
 *
 * - `journal`: `"full"` (keep payloads) or `"summary"` (metadata only), as the run asks;
 * - `readOnly`: `true` when a read command (report, export, merge, serve, watch) opens the
 *   store: the store must not create, migrate or write anything, and should fail with
 *   `StoreUnavailable` when there is nothing to read;
 * - `baseDir`: the directory relative parts of the URI may be resolved against (the
 *   experiment file's directory for `run`/`resume`, the working directory for read commands).
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreFactoryOptions {
  readonly journal: "full" | "summary"
  readonly readOnly: boolean
  readonly baseDir: string
}

/**
 * A plugin's store constructor for one URI scheme: called with the parsed URI
 * (`new URL("myscheme://bucket/runs.db")`) and {@link StoreFactoryOptions}, it returns a
 * `Layer` that builds the `Store` in the layer's scope (close what it opens in that scope).
 * The layer may require the run's `ArtifactBackend` (the run's `artifactBackend` choice is
 * provided; read commands provide the inline backend). It should fail with `StoreUnavailable`
 * (cannot reach or trust the store), `ConfigError` (a malformed URI: exit 2) or `PluginError`.
 * A factory that throws, returns something that is not a Layer, or whose layer fails with
 * anything else or dies, is reported as a `PluginError` naming the plugin and the scheme.
 *
 * @since 0.1.0
 * @category models
 */
export type StoreFactory = (
  uri: URL,
  options: StoreFactoryOptions
) => Layer.Layer<Store, StoreUnavailable | ConfigError | PluginError, ArtifactBackend>

/**
 * What an artifact backend factory is told besides the URI: `baseDir`, the directory relative
 * parts of the URI may be resolved against (the experiment file's directory).
 *
 * @since 0.1.0
 * @category models
 */
export interface ArtifactBackendFactoryOptions {
  readonly baseDir: string
}

/**
 * A plugin's artifact backend constructor for one URI scheme (`artifactBackend:
 * "myblobs://bucket/prefix"`): returns a `Layer` that builds the `ArtifactBackend`. Failures
 * are handled as for {@link StoreFactory}.
 *
 * @since 0.1.0
 * @category models
 */
export type ArtifactBackendFactory = (
  uri: URL,
  options: ArtifactBackendFactoryOptions
) => Layer.Layer<ArtifactBackend, StoreUnavailable | ConfigError | PluginError>

/**
 * URI schemes assay handles itself; a plugin store or backend under one of them is ignored
 * (listed as shadowed). `file` is the built-in file artifact backend (`file:///blobs`) and, for
 * stores, an SQLite file (`file:///runs/qa.db`).
 *
 * @since 0.1.0
 * @category constants
 */
export const builtinSchemes: ReadonlyArray<string> = ["file"]

/**
 * The form of a URI scheme a plugin may register: a lowercase letter, then at least one more
 * of `a-z 0-9 + . -` (RFC 3986 §3.1, lowercased; one-letter schemes are refused so that a
 * Windows drive `C:\runs` or `C://runs` is never read as a URI).
 *
 * @since 0.1.0
 * @category constants
 */
export const schemePattern: RegExp = /^[a-z][a-z0-9+.-]+$/

/**
 * A plugin-provided factory with the specifier of the plugin it came from.
 *
 * @since 0.1.0
 * @category models
 */
export interface Provided<F> {
  readonly plugin: string
  readonly factory: F
}

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
  /** URI scheme (without `:`, lowercase) → store factory. */
  readonly stores?: Readonly<Record<string, StoreFactory>> | undefined
  /** URI scheme (without `:`, lowercase) → artifact backend factory. */
  readonly artifactBackends?: Readonly<Record<string, ArtifactBackendFactory>> | undefined
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
 * it provides, how many codecs, the store and artifact backend URI schemes it provides, names
 * ignored because a built-in has them (`shadowed`; a shadowed scheme is listed as
 * `scheme://`), and `error` (`null` when it loaded).
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
  readonly stores: ReadonlyArray<string>
  readonly artifactBackends: ReadonlyArray<string>
  readonly shadowed: ReadonlyArray<string>
  readonly error: string | null
}

/**
 * Every plugin loaded for one config, and what they provide (built-ins excluded):
 * - `plugins`: each plugin with its status;
 * - `tasks`: task name → the task or factory and the plugin it came from;
 * - `algorithms`: name → algorithm plugin (for `resolveAlgorithm`);
 * - `codecs`: every codec, in plugin order;
 * - `stores`: URI scheme → store factory and its plugin (first plugin listed wins);
 * - `artifactBackends`: URI scheme → artifact backend factory and its plugin;
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
  readonly stores: ReadonlyMap<string, Provided<StoreFactory>>
  readonly artifactBackends: ReadonlyMap<string, Provided<ArtifactBackendFactory>>
  readonly errors: ReadonlyMap<string, string>
}

/**
 * A registry with no plugin.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty: PluginRegistry = {
  plugins: [],
  tasks: new Map(),
  algorithms: new Map(),
  codecs: [],
  stores: new Map(),
  artifactBackends: new Map(),
  errors: new Map()
}

/**
 * Both registries in one: `first`'s entries win over `second`'s (as between plugins of one
 * list, the first one listed wins); plugins, codecs and errors are concatenated.
 *
 * @since 0.1.0
 * @category constructors
 */
export const merge = (first: PluginRegistry, second: PluginRegistry): PluginRegistry => {
  const union = <V>(a: ReadonlyMap<string, V>, b: ReadonlyMap<string, V>): ReadonlyMap<string, V> => {
    const out = new Map(b)
    for (const [k, v] of a) out.set(k, v)
    return out
  }
  return {
    plugins: [...first.plugins, ...second.plugins],
    tasks: union(first.tasks, second.tasks),
    algorithms: union(first.algorithms, second.algorithms),
    codecs: [...first.codecs, ...second.codecs],
    stores: union(first.stores, second.stores),
    artifactBackends: union(first.artifactBackends, second.artifactBackends),
    errors: union(first.errors, second.errors)
  }
}

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
 * Imports a module through the {@link ModuleLoader} in context (a plain `import()` unless the
 * CLI provides its own, which registers tsx's loader when it meets a TypeScript module).
 * Fails with the import error's message.
 *
 * @since 0.1.0
 * @category loading
 */
export const importModule = (specifier: string, baseDir: string): Effect.Effect<Record<string, unknown>, string> =>
  Effect.flatMap(ModuleLoader, (loader) => {
    const url = moduleUrl(specifier, baseDir)
    return loader.load(url).pipe(Effect.map((mod) => loadsAsCommonJs(url) ? commonJsNamespace(mod) : mod), Effect.mapError((e) => {
      const message = e instanceof Error ? e.message.split("\n")[0]! : String(e)
      return /Cannot find module|require is not defined|Cannot use import statement|Cannot require\(\) ES Module/.test(message) &&
          loadsAsCommonJs(url)
        ? `${message} (${path.basename(new URL(url).pathname)} loads as CommonJS: no package.json with ` +
          `"type": "module" above it; name it .mts, or add {"type": "module"} in a package.json next to it)`
        : message
    }))
  })

/**
 * The namespace of a CommonJS module imported from an ES module: Node offers `module.exports`
 * as `default`, and as named exports only the names its lexer finds in the source, which misses
 * those of a TypeScript module compiled by tsx; so every property of `module.exports` is a
 * named export too (as TypeScript's `esModuleInterop` sees it).
 */
const commonJsNamespace = (mod: Record<string, unknown>): Record<string, unknown> => {
  const exports = mod["default"]
  return isRecord(exports) ? { ...exports, ...mod } : mod
}

/**
 * Whether tsx loads the TypeScript file at `url` as CommonJS: a `.ts`/`.cts` file whose nearest
 * `package.json` does not say `"type": "module"`. Such a module cannot import `assay` through
 * the CLI's resolution hooks, and its code digests differ from the same code loaded as ESM.
 */
const loadsAsCommonJs = (url: string): boolean => {
  if (!url.startsWith("file:")) return false
  const file = new URL(url).pathname
  if (file.endsWith(".cts")) return true
  if (!file.endsWith(".ts")) return false
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { type?: unknown }
      return pkg.type !== "module"
    } catch {
      // no (readable) package.json here: look further up
    }
    if (path.dirname(dir) === dir) return true
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const definitionOf = (mod: Record<string, unknown>): PluginDefinition => {
  const d = mod["default"]
  const source = isRecord(d) &&
      ("tasks" in d || "algorithms" in d || "codecs" in d || "stores" in d || "artifactBackends" in d)
    ? d
    : mod
  return source as PluginDefinition
}

/**
 * Loads the plugins named in a config (`specifiers`, resolved against `baseDir`). Never
 * fails: a plugin that cannot be imported, or whose exports have the wrong shape, is kept in
 * `plugins` with its `error` and in `errors`. Built-in task and algorithm names and built-in
 * URI schemes ({@link builtinSchemes}) are skipped (built-ins always win); a scheme that does
 * not match {@link schemePattern} is a plugin error; between plugins, the first one listed wins.
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
    const stores = new Map<string, Provided<StoreFactory>>()
    const artifactBackends = new Map<string, Provided<ArtifactBackendFactory>>()
    const errors = new Map<string, string>()
    // the built-in tasks (their HTTP client among them) load only when plugins do: a command
    // that reads a store file never pays for them
    const builtins = specifiers.length === 0
      ? new Set<string>()
      : (yield* Effect.promise(() => import("../../tasks/Builtins.js"))).builtins
    for (const specifier of specifiers) {
      const mod = yield* Effect.either(importModule(specifier, baseDir))
      if (mod._tag === "Left") {
        errors.set(specifier, mod.left)
        plugins.push({
          specifier,
          name: specifier,
          tasks: [],
          algorithms: [],
          codecs: 0,
          stores: [],
          artifactBackends: [],
          shadowed: [],
          error: mod.left
        })
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
      const schemes = <F>(field: "stores" | "artifactBackends", into: Map<string, Provided<F>>): Array<string> => {
        const value: unknown = def[field]
        const names: Array<string> = []
        if (value === undefined) return names
        if (!isRecord(value)) {
          problems.push(`\`${field}\` must be an object of URI scheme → factory`)
          return names
        }
        for (const [scheme, factory] of Object.entries(value)) {
          if (typeof factory !== "function") {
            problems.push(`${field}.${scheme} is not a factory function`)
            continue
          }
          if (!schemePattern.test(scheme)) {
            problems.push(
              `${field}: "${scheme}" is not a URI scheme (lowercase letter, then letters, digits, "+", "." or "-"; at least 2 characters)`
            )
            continue
          }
          if (builtinSchemes.includes(scheme)) {
            shadowed.push(`${scheme}://`)
            continue
          }
          names.push(scheme)
          if (!into.has(scheme)) into.set(scheme, { plugin: specifier, factory: factory as F })
        }
        return names
      }
      const storeSchemes = schemes<StoreFactory>("stores", stores)
      const backendSchemes = schemes<ArtifactBackendFactory>("artifactBackends", artifactBackends)
      const error = problems.length === 0 ? null : problems.join("; ")
      if (error !== null) errors.set(specifier, error)
      plugins.push({
        specifier,
        name: typeof def.name === "string" ? def.name : specifier,
        tasks: taskNames,
        algorithms: algoNames,
        codecs: cs?.length ?? 0,
        stores: storeSchemes,
        artifactBackends: backendSchemes,
        shadowed,
        error
      })
    }
    return { plugins, tasks, algorithms, codecs, stores, artifactBackends, errors }
  })
