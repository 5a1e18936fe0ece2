/**
 * The `assay` program on the unbundled runtime (`dist/cli/bin.js`): what `bin/assay` falls back
 * to when a command loads user code (a TypeScript or JavaScript experiment, a plugin), so that
 * the user's `import "assay"` / `import "effect"` get the very module instances that run them.
 * Registers the resolution hooks and tsx's TypeScript loader only when the first such module
 * is imported (`ModuleLoader.registering`).
 *
 * @since 0.1.0
 */
import { registering } from "../layers/ModuleLoader.js"
import { main } from "./main.js"

/**
 * Runs `argv` (as `process.argv`) on this runtime and exits with the command's code.
 *
 * @since 0.1.0
 * @category running
 */
export const runFull = (argv: ReadonlyArray<string>): void =>
  main(argv, {
    modules: registering({
      hooks: new URL("./resolveHooks.mjs", import.meta.url).href,
      index: new URL("../index.js", import.meta.url).href
    })
  })
