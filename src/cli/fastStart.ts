/**
 * The CLI's fast start: `src/cli/launcher.ts` runs this module from a single CommonJS bundle
 * (`dist/bundle/assay-<hash>.cjs`, made by `scripts/build.mjs`) in which effect, @effect/* and
 * assay are bundled, with V8's code cache, so that a command starts without resolving,
 * compiling and evaluating the ~1,000 module files of effect, @effect/* and assay one by one.
 *
 * A bundle carries its own copies of `effect` and `assay`. User code (a TypeScript or
 * JavaScript experiment, a plugin) must share the instances of the code that runs it, so the
 * bundle never loads any: it runs with `ModuleLoader.refusing`, and a command that meets a user
 * module stops (before printing or writing anything) and `fallback` runs it again on the
 * unbundled `dist/` runtime (`dist/cli/bin.js`), where `import "assay"` is the CLI's own
 * `dist/index.js`.
 *
 * @since 0.1.0
 */
import { refusing } from "../layers/ModuleLoader.js"
import { main } from "./main.js"

/**
 * Runs `argv` (as `process.argv`) on the bundle; calls `fallback` instead of exiting when the
 * command needs user code.
 *
 * @since 0.1.0
 * @category running
 */
export const start = (argv: ReadonlyArray<string>, fallback: () => void): void =>
  main(argv, { modules: refusing, onNeedsFullRuntime: fallback })
