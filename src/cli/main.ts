/**
 * The `assay` command-line program: the root command, its subcommands (each imported only when
 * it is asked for), and a teardown that gives the documented exit codes (0 / 1 / 2 / 75 / 130).
 *
 * @since 0.1.0
 */
import { quietDependencyWarnings } from "./dependencyWarnings.js"
import type * as CliCommand from "@effect/cli/Command"
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as ValidationError from "@effect/cli/ValidationError"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import { stripVTControlCharacters } from "node:util"
import { ModuleLoader, type ModuleLoaderService, NeedsFullRuntime } from "../layers/ModuleLoader.js"
import { afterStdioDrained } from "../layers/internal/flushStdio.js"
import { redactUrlsIn } from "../layers/internal/pg/url.js"
import * as Signals from "../services/Signals.js"
import { exitCodeOf } from "./Exit.js"
import * as Help from "./Help.js"

/**
 * The version `assay --version` prints (the package's version).
 *
 * @since 0.1.0
 * @category constants
 */
export const version = "0.1.0"

/** Any subcommand: its parsed value is not looked at here. */
type Sub = CliCommand.Command<string, never, unknown, unknown>

/** What a command module gives: its commands. */
interface Loaded {
  readonly commands: ReadonlyArray<Sub>
}

const one = (command: unknown): Loaded => ({ commands: [command as Sub] })

/**
 * The subcommands in the order `assay --help` lists them, each with the import of the module
 * that defines it: a command's dependencies (the runner, the store, the HTTP server, ...) load
 * only when that command runs.
 */
const subcommands: ReadonlyArray<readonly [string, () => Promise<Loaded>]> = [
  ["mock-llm", () => import("./MockLlmCommand.js").then((m) => one(m.mockLlm))],
  ["validate", () => import("./ValidateCommand.js").then((m) => one(m.validate))],
  ["run", () => import("./RunCommand.js").then((m) => one(m.run))],
  ["resume", () => import("./RunCommand.js").then((m) => one(m.resume))],
  ["runner", () => import("./ClusterCommand.js").then((m) => one(m.runner))],
  ["plugins", () => import("./PluginsCommand.js").then((m) => one(m.plugins))],
  ["schema", () => import("./SchemaCommand.js").then((m) => one(m.schema))],
  ["report", () => import("./ReportCommand.js").then((m) => one(m.report))],
  ["export", () => import("./ExportCommand.js").then((m) => one(m.exportCommand))],
  ["merge", () => import("./MergeCommand.js").then((m) => one(m.merge))],
  ["serve", () => import("./ServeCommand.js").then((m) => one(m.serve))],
  ["watch", () => import("./WatchCommand.js").then((m) => one(m.watch))],
  ["migrate", () => import("./MigrateCommand.js").then((m) => one(m.migrate))],
  ["study", () => import("./StudyCommand.js").then((m) => one(m.study))]
]

/**
 * The names of the subcommands, in help order.
 *
 * @since 0.1.0
 * @category commands
 */
export const subcommandNames: ReadonlyArray<string> = subcommands.map(([name]) => name)

/**
 * Imports the subcommands `argv` can need: only the named one when `argv[2]` is a subcommand's
 * name, else all of them (the root's help, `--version`, an unknown name that the parser then
 * reports with suggestions).
 *
 * @since 0.1.0
 * @category commands
 */
export const loadSubcommands = async (argv: ReadonlyArray<string>): Promise<{
  readonly commands: ReadonlyArray<Sub>
}> => {
  const named = subcommands.find(([name]) => name === argv[2])
  const loaded = await Promise.all((named === undefined ? subcommands : [named]).map(([, load]) => load()))
  return { commands: loaded.flatMap((l) => l.commands) }
}

/**
 * What `assay` is, in one line (the first line of `assay --help`).
 *
 * @since 0.1.0
 * @category constants
 */
export const description = "run experiments as checkpointed, resumable pipelines over shared rate-limited pools."

/**
 * The root `assay` command over the given subcommands.
 *
 * @since 0.1.0
 * @category commands
 */
export const rootCommand = (commands: ReadonlyArray<Sub>) =>
  Command.make("assay").pipe(
    Command.withDescription(description),
    Command.withSubcommands(commands as [Sub, ...Array<Sub>])
  )

/**
 * Runs the command line `argv` (as `process.argv`) over the loaded `commands`: a help screen
 * (`assay`, `--help`, `-h`) is printed by {@link Help} within 80 columns; an unknown option or
 * command is refused on stderr with the closest known name (the config loader's `closest`),
 * a numeric option given a value that is not a number is refused naming the option, and an
 * option given without its value says what it needs (`--cache-mode needs a value (one of …)`), each
 * failing with a `ValidationError` (exit 2); anything else is parsed and run by `@effect/cli`
 * (a missing argument or option is followed by where to read what the command takes:
 * `see assay study confirm --help ...`).
 *
 * @since 0.1.0
 * @category running
 */
export const runCommandLine = (argv: ReadonlyArray<string>, commands: ReadonlyArray<Sub>) => {
  const routed = Help.route(argv.slice(2), commands, subcommandNames)
  switch (routed._tag) {
    case "RootHelp":
      return Console.log(Help.renderRoot(version, description, commands))
    case "CommandHelp":
      return Console.log(Help.renderCommand(routed.command, routed.parent))
    case "Unknown":
      // the suggestion helper lives with the config loader: loaded only on this path
      return Effect.promise(() => import("../config/internal/issues.js")).pipe(
        Effect.map((m) => Help.unknownMessage(routed, m.closest)),
        Effect.tap((message) => Console.error(message)),
        Effect.flatMap((message) => Effect.fail(ValidationError.invalidArgument(HelpDoc.p(message))))
      )
    case "BadValue":
      return Console.error(Help.badValueMessage(routed)).pipe(
        Effect.zipRight(Effect.fail(ValidationError.invalidValue(HelpDoc.p(Help.badValueMessage(routed)))))
      )
    case "MissingValue":
      return Console.error(Help.missingValueMessage(routed)).pipe(
        Effect.zipRight(Effect.fail(ValidationError.missingValue(HelpDoc.p(Help.missingValueMessage(routed)))))
      )
    case "Parse":
      return Command.run(rootCommand(commands), { name: "assay", version })(
        routed.args === undefined ? argv : [...argv.slice(0, 2), ...routed.args]
      ).pipe(
        // a missing argument or option (`Expected to find option: '--repeats'`): where to read
        // what the command takes
        Effect.tapError((e) =>
          routed.where !== undefined && ValidationError.isValidationError(e) && (ValidationError.isMissingValue(e) || ValidationError.isMissingFlag(e))
            ? Console.error(`see ${routed.where} --help for the arguments and options it takes`)
            : Effect.void
        )
      )
  }
}

/**
 * Parses `argv` (as `process.argv`, with the node and script entries first) and runs the
 * chosen command, with only the subcommands `argv` needs loaded.
 *
 * @since 0.1.0
 * @category running
 */
export const cli = (argv: ReadonlyArray<string>) =>
  Effect.flatMap(
    Effect.promise(() => loadSubcommands(argv)),
    ({ commands }) => runCommandLine(argv, commands)
  )

/**
 * Outside a terminal (output piped or redirected) or with `NO_COLOR` set, what the CLI prints
 * through `Console` (help, reports) loses its ANSI styling, so files and pipes get plain text.
 *
 * @since 0.1.0
 * @category running
 */
export const plainWhenPiped = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  process.stdout.isTTY === true && process.env["NO_COLOR"] === undefined
    ? self
    : Effect.consoleWith((console) => {
      const strip = (args: ReadonlyArray<unknown>) =>
        args.map((a) => (typeof a === "string" ? stripVTControlCharacters(a) : a))
      return Console.withConsole(self, {
        ...console,
        log: (...args) => console.log(...strip(args)),
        error: (...args) => console.error(...strip(args)),
        info: (...args) => console.info(...strip(args)),
        warn: (...args) => console.warn(...strip(args))
      })
    })

/**
 * Options of {@link main}:
 * - `modules`: how user modules (TypeScript/JavaScript experiments, plugins) are imported
 *   (default: a plain `import()`);
 * - `onNeedsFullRuntime`: called instead of exiting when a command stops with
 *   `NeedsFullRuntime` (the fast start met a user module; the caller runs the command again on
 *   the unbundled runtime). Without it such a stop is a defect (exit 1).
 *
 * @since 0.1.0
 * @category running
 */
export interface MainOptions {
  readonly modules?: ModuleLoaderService | undefined
  readonly onNeedsFullRuntime?: ((url: string) => void) | undefined
}

/**
 * The CLI's logger: Effect's default line (`timestamp=… level=… fiber=… message=…`) written to
 * standard error, never to standard output. Effect's default logger writes with `console.log`
 * (stdout), so a log line of a command asked for JSON on stdout (`run --summary json`,
 * `report --json`, `export` to stdout, `study report --json`, `validate --json`) came before
 * the JSON and broke its reader (issue 18: a readOnly cache read from a snapshot).
 */
const stderrLogger = Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.stringLogger))

const needsFullRuntime = (exit: Exit.Exit<unknown, unknown>): Option.Option<string> =>
  Exit.isFailure(exit)
    ? Option.map(
      Cause.find(exit.cause, (reason) =>
        reason._tag === "Die" && reason.defect instanceof NeedsFullRuntime ? Option.some(reason.defect.url) : Option.none()),
      (url) => url
    )
    : Option.none()

/**
 * Runs the CLI as the process's main program (`NodeRuntime.runMain`) and exits with
 * {@link exitCodeOf}'s code: 0 / 1 / 2 / 75 / 130.
 *
 * The stop signals (SIGINT, SIGTERM, SIGHUP) are the `Signals` service's: one that nothing
 * newer claims interrupts the command (exit 130); a run with the runner's signal handling
 * claims them while it runs (first signal: graceful stop with its grace period; second:
 * immediate stop), prints its report and exits 130 itself (`Signals.interruptOnStop`).
 * `NodeRuntime.runMain` exits 0 after Ctrl-C and interrupts its main fiber on SIGINT/SIGTERM
 * whatever else listens: the exit code is therefore the command's own exit, not the main
 * fiber's, and the process ends when the command is done (an open handle a plugin left does not
 * keep it alive).
 *
 * @since 0.1.0
 * @category running
 */
export const main = (argv: ReadonlyArray<string>, options: MainOptions = {}): void => {
  quietDependencyWarnings()
  let outcome: Exit.Exit<unknown, unknown> | undefined
  let release = () => {}
  const program = plainWhenPiped(cli(argv)).pipe(
    Effect.onExit((exit) =>
      Effect.sync(() => {
        outcome = exit
        // before the program's claim on the signals ends: a late signal (a second Ctrl-C just
        // as a graceful stop finishes) must not kill the process by its default action
        release = Signals.absorb()
      })
    ),
    Signals.interruptOnStop,
    Effect.provideService(ModuleLoader, options.modules ?? ModuleLoader.defaultValue()),
    // one instance of its own: the bundle's and the unbundled runtime's never share listeners
    Effect.provideService(Signals.Signals, Signals.makeProcess()),
    // every log line on stderr: stdout carries only what a command prints (its JSON, a table)
    Effect.provide(Layer.merge(NodeContext.layer, stderrLogger))
  )
  NodeRuntime.runMain(program, {
    disableErrorReporting: true,
    disablePrettyLogger: true,
    teardown: (mainExit) => {
      const exit = outcome ?? mainExit
      const fallback = needsFullRuntime(exit)
      if (Option.isSome(fallback) && options.onNeedsFullRuntime !== undefined) {
        release()
        options.onNeedsFullRuntime(fallback.value)
        return
      }
      // the last line of defence for a connection URL quoted in an error: never its password
      const code = exitCodeOf(exit, (line) => process.stderr.write(`${redactUrlsIn(line)}\n`))
      // a large output piped into a slow reader is still queued: exiting now would cut it
      process.exitCode = code
      afterStdioDrained(() => process.exit(code))
    }
  })
}
