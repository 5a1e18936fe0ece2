/**
 * Module resolution hooks of the `assay` command-line program, registered by its module loader
 * (`ModuleLoader.registering`, see https://nodejs.org/api/module.html#customization-hooks) the
 * first time a command loads a user's module (a TypeScript or JavaScript experiment, a plugin).
 *
 * An experiment or plugin outside assay's own directory imports `assay` (and usually
 * `effect`); no `node_modules` next to it need provide them:
 * - `assay` resolves to the CLI's own `index` module (`dist/index.js` of this installation),
 *   the same module instance the CLI runs, so tasks, tags and schemas are shared;
 * - any other bare specifier that cannot be resolved from the importing file is resolved from
 *   assay's installation (`effect`, `@effect/platform`, ...), so the versions match the CLI's.
 * A specifier the importing file can resolve on its own is left alone.
 *
 * A plain `.mjs` file: Node loads hooks on its own thread, before any TypeScript loader.
 *
 * @since 0.1.0
 */

/** @type {string} */
let index = ""

/**
 * Receives the URL of the CLI's `index` module.
 *
 * @param {{ readonly index: string }} data
 */
export async function initialize(data) {
  index = data.index
}

const isBare = (/** @type {string} */ s) =>
  !s.startsWith(".") && !s.startsWith("/") && !s.startsWith("file:") && !s.startsWith("node:") && !s.startsWith("data:")

/**
 * Resolves `assay` to the CLI's index and retries unresolvable bare specifiers from it.
 *
 * @param {string} specifier
 * @param {{ parentURL?: string; conditions: ReadonlyArray<string>; importAttributes: Record<string, string> }} context
 * @param {(specifier: string, context?: object) => Promise<{ url: string }>} nextResolve
 */
export async function resolve(specifier, context, nextResolve) {
  if (index !== "" && (specifier === "assay" || specifier === "assay/")) {
    return nextResolve(index, context)
  }
  try {
    return await nextResolve(specifier, context)
  } catch (error) {
    const code = /** @type {{ code?: string }} */ (error).code
    if (index === "" || !isBare(specifier) || (code !== "ERR_MODULE_NOT_FOUND" && code !== "ERR_PACKAGE_PATH_NOT_EXPORTED")) {
      throw error
    }
    return nextResolve(specifier, { ...context, parentURL: index })
  }
}
