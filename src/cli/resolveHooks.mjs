/**
 * Module resolution hooks of the `assay` CLI (registered by `register.mjs`, see
 * https://nodejs.org/api/module.html#customization-hooks).
 *
 * An experiment or plugin written in TypeScript outside assay's own directory imports
 * `assay` (and usually `effect`); no `node_modules` next to it need provide them:
 * - `assay` (and `assay/...`) resolves to this installation's `src/index.ts`, the same module
 *   instance the CLI itself runs, so its built-in tasks keep the same code digests;
 * - any other bare specifier that cannot be resolved from the importing file is resolved from
 *   assay's installation (`effect`, `@effect/platform`, ...), so the versions match the CLI's.
 * A specifier the importing file can resolve on its own is left alone.
 *
 * @since 0.1.0
 */
import { pathToFileURL } from "node:url"

/** @type {string} */
let root = ""

/**
 * Receives assay's installation directory from `register.mjs`.
 *
 * @param {{ readonly root: string }} data
 */
export async function initialize(data) {
  root = data.root
}

const isBare = (/** @type {string} */ s) =>
  !s.startsWith(".") && !s.startsWith("/") && !s.startsWith("file:") && !s.startsWith("node:") && !s.startsWith("data:")

/**
 * Resolves `assay` to this installation and retries unresolvable bare specifiers from it.
 *
 * @param {string} specifier
 * @param {{ parentURL?: string; conditions: ReadonlyArray<string>; importAttributes: Record<string, string> }} context
 * @param {(specifier: string, context?: object) => Promise<{ url: string }>} nextResolve
 */
export async function resolve(specifier, context, nextResolve) {
  if (root !== "" && (specifier === "assay" || specifier === "assay/")) {
    return nextResolve(pathToFileURL(`${root}/src/index.ts`).href, context)
  }
  try {
    return await nextResolve(specifier, context)
  } catch (error) {
    const code = /** @type {{ code?: string }} */ (error).code
    if (root === "" || !isBare(specifier) || (code !== "ERR_MODULE_NOT_FOUND" && code !== "ERR_PACKAGE_PATH_NOT_EXPORTED")) {
      throw error
    }
    return nextResolve(specifier, { ...context, parentURL: pathToFileURL(`${root}/package.json`).href })
  }
}
