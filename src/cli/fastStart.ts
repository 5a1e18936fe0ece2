/**
 * The entry point of `bin/assay`, bundled with its dependencies into `dist/bundle/` (by
 * `scripts/build.mjs`) so that a command starts without resolving and evaluating the ~1,000
 * module files of effect, @effect/* and assay one by one.
 *
 * A bundle carries its own copies of `effect` and `assay`. User code (a TypeScript or
 * JavaScript experiment, a plugin) must share the instances of the code that runs it, so the
 * bundle never loads any: it runs with `ModuleLoader.refusing`, and a command that meets a user
 * module stops (before printing or writing anything) and runs again on the unbundled `dist/`
 * runtime (`dist/cli/bin.js`), where `import "assay"` is the CLI's own `dist/index.js`. A
 * command line that obviously loads user code (a `--plugin`, a module as the config) goes there
 * at once.
 *
 * @since 0.1.0
 */
import { refusing } from "../layers/ModuleLoader.js"
import { main } from "./main.js"

const moduleFile = /\.[mc]?[jt]s$/

/**
 * Whether `argv` names user code on the command line: a `--plugin` option, or a JavaScript or
 * TypeScript file (the `-c` of `run` or `validate`, or the `plugins` command's files).
 *
 * @since 0.1.0
 * @category running
 */
export const namesUserCode = (argv: ReadonlyArray<string>): boolean =>
  argv.slice(2).some((a) => a === "--plugin" || a.startsWith("--plugin=") || moduleFile.test(a))

const full = (): void => {
  // A computed URL: the bundler must not pull the unbundled runtime into the bundle.
  const url = new URL("../cli/bin.js", import.meta.url).href
  import(url).then(
    (m: { readonly runFull: (argv: ReadonlyArray<string>) => void }) => m.runFull(process.argv),
    (error: unknown) => {
      process.stderr.write(`assay: cannot load ${url}: ${String(error)}\n`)
      process.exit(1)
    }
  )
}

if (namesUserCode(process.argv)) full()
else main(process.argv, { modules: refusing, onNeedsFullRuntime: full })
