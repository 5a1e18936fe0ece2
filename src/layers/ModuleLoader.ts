/**
 * How assay imports a user's module: a TypeScript or JavaScript experiment, a plugin, a task
 * module named by a config file. Every such import goes through `Plugins.importModule`, which
 * asks the {@link ModuleLoader} in context.
 *
 * - By default (a user's own program, a test) the module is imported with a plain `import()`:
 *   the program's own loader (tsx, vitest, plain node) decides how `.ts` files load.
 * - The `assay` command-line program provides {@link layerCli}: it registers its module
 *   resolution hooks (`assay` resolves to the CLI's own installation) the first time it meets a
 *   user's module, and tsx's TypeScript loader the first time that module is a `.ts`/`.mts`/
 *   `.cts` file, so commands that load no user code never pay for either.
 * - The CLI's fast start (`dist/bundle`, where effect and assay are bundled) provides
 *   {@link refusing}: user code must share the `effect` and `assay` instances of the code
 *   that runs it, which a bundle cannot offer, so the bundle stops with {@link NeedsFullRuntime}
 *   and the CLI starts over on the unbundled `dist/` (see `src/cli/bin.ts`).
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"

/**
 * Imports the module at `url` (a `file:` URL or a package specifier) and gives its namespace
 * object; fails with what the import threw (a `SyntaxError`, `ERR_MODULE_NOT_FOUND`, ...).
 *
 * @since 0.1.0
 * @category models
 */
export interface ModuleLoaderService {
  readonly load: (url: string) => Effect.Effect<Record<string, unknown>, unknown>
}

/**
 * A plain dynamic `import(url)`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const plain: ModuleLoaderService = {
  load: (url) => Effect.tryPromise({ try: () => import(url) as Promise<Record<string, unknown>>, catch: (e) => e })
}

/**
 * The loader in context (default: {@link plain}).
 *
 * @since 0.1.0
 * @category tags
 */
export class ModuleLoader extends Context.Reference<ModuleLoader>()("assay/ModuleLoader", {
  defaultValue: (): ModuleLoaderService => plain
}) {}

/**
 * The signal of {@link refusing}: the command met a user's module (`url`) and must run again
 * on the unbundled runtime. A defect on purpose: no command catches it, so it reaches the
 * CLI's entry point unchanged, before the command has printed or written anything (user
 * modules are loaded while the experiment is read, before any store is opened).
 *
 * @since 0.1.0
 * @category errors
 */
export class NeedsFullRuntime extends Data.TaggedError("NeedsFullRuntime")<{ readonly url: string }> {}

/**
 * A loader that loads nothing: every `load` dies with {@link NeedsFullRuntime}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const refusing: ModuleLoaderService = {
  load: (url) => Effect.die(new NeedsFullRuntime({ url }))
}

/** Whether the TypeScript loader and the resolution hooks are registered in this process. */
const registered = { hooks: false, typescript: false }

/** tsx's package entry (`dist/loader.mjs`: registers its hooks when imported; it has no types). */
const tsxLoader: string = "tsx"

/**
 * Whether the file at `url` (a `file:` URL) names the `assay` package in an import (a quick
 * look at its text: `"assay"` or `'assay'`); false when it cannot be read.
 */
const namesAssay = (url: string): boolean => {
  try {
    return url.startsWith("file:") && /["']assay["']/.test(fs.readFileSync(new URL(url), "utf8"))
  } catch {
    return false
  }
}

const isTypeScript = (url: string): boolean => /\.[mc]?ts$/.test(url.split(/[?#]/)[0]!)

/**
 * The CLI's loader: before the first user module, imports `index` when that module names
 * `assay` (so that the modules of assay, effect and @effect/* are loaded before any hook slows
 * each load down), then registers the resolution hooks
 * (`resolveHooks.mjs` next to this module's CLI: `assay` resolves to `index` (the CLI's own
 * `index.js`, so user code and the CLI share one instance), and bare specifiers a user's file
 * cannot resolve are resolved from assay's installation); before the first TypeScript module,
 * registers tsx's ESM and CommonJS loaders (`import "tsx"`, as `node --import tsx` does). Both stay
 * registered for the process's life (Node offers no unregister). A module of the CLI's own
 * installation (a URL under the directory of `index`, e.g. `cli/ClusterRun.js`, which the CLI
 * loads through its loader only to keep it out of the fast-start bundle) is imported at once,
 * with no hooks registered: it is not user code, and its module graph would otherwise go
 * through the hooks.
 *
 * - `hooks`: the URL of the hooks module;
 * - `index`: the URL `import "assay"` resolves to (its directory: the CLI's own modules).
 *
 * @since 0.1.0
 * @category constructors
 */
export const registering = (options: { readonly hooks: string; readonly index: string }): ModuleLoaderService => {
  const own = new URL(".", options.index).href
  return {
    load: (url) =>
      Effect.tryPromise({
        try: async () => {
          // one of the CLI's own modules (`cli/ClusterRun.js`, kept out of the fast-start
          // bundle and loaded through this loader for that): not user code, its imports resolve
          // from assay's installation; through the hooks its graph (@effect/cluster, -workflow,
          // -sql-pg) cost ~0.5 s more CPU per start (BENCHMARKS.md, start17am)
          if (url.startsWith(own)) return await (import(url) as Promise<Record<string, unknown>>)
          if (!registered.hooks) {
            // a first user module that imports `assay`: the CLI's whole module graph (its `index`
            // and, through it, effect and @effect/*) first, while no hook is registered: once
            // hooks are registered every module the process loads goes through them (a round trip
            // to Node's hooks thread, and tsx's resolution), which doubled the CPU time of loading
            // the modules `import "assay"` brings (BENCHMARKS.md, ci20). A module that does not
            // name `assay` may need much less of it: nothing is loaded ahead then.
            if (namesAssay(url)) await import(options.index)
            const { register } = await import("node:module")
            register(options.hooks, { data: { index: options.index } })
            registered.hooks = true
          }
          if (!registered.typescript && isTypeScript(url)) {
            // what `node --import tsx` does: tsx's ESM and CommonJS loaders, working together (a
            // `.ts` file with no `"type": "module"` above it loads as CommonJS)
            await import(tsxLoader)
            registered.typescript = true
          }
          return await (import(url) as Promise<Record<string, unknown>>)
        },
        catch: (e) => e
      })
  }
}
