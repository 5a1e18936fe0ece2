/**
 * The `assay` command-line program: the root command, its subcommands, and a teardown that
 * gives the documented exit codes (0 / 1 / 2 / 130).
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Console, Effect, FiberId } from "effect"
import { stripVTControlCharacters } from "node:util"
import { exitCodeOf } from "./Exit.js"
import { exportCommand } from "./ExportCommand.js"
import { merge } from "./MergeCommand.js"
import { mockLlm } from "./MockLlmCommand.js"
import { plugins } from "./PluginsCommand.js"
import { report } from "./ReportCommand.js"
import { resume, run, signalGovernor } from "./RunCommand.js"
import { schema } from "./SchemaCommand.js"
import { serve } from "./ServeCommand.js"
import { validate } from "./ValidateCommand.js"
import { watch } from "./WatchCommand.js"

/**
 * The root `assay` command. Subcommands are added by their own modules.
 *
 * @since 0.1.0
 * @category commands
 */
export const assay = Command.make("assay").pipe(
  Command.withDescription(
    "Run experiments as checkpointed, resumable pipelines over shared rate-limited pools."
  ),
  Command.withSubcommands([mockLlm, validate, run, resume, plugins, schema, report, exportCommand, merge, serve, watch])
)

/**
 * Parses `argv` (as `process.argv`, with the node and script entries first) and runs the
 * chosen command.
 *
 * @since 0.1.0
 * @category running
 */
export const cli = Command.run(assay, { name: "assay", version: "0.1.0" })

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
 * Runs the CLI as the process's main program and exits with {@link exitCodeOf}'s code.
 *
 * Unlike `NodeRuntime.runMain` (which exits 0 after Ctrl-C), SIGINT/SIGTERM interrupt the
 * program (exit 130) *unless* a run with the runner's own signal handlers is in progress
 * (`signalGovernor.runnerGoverns`): then the runner governs (first signal: graceful stop with
 * its grace period; second: immediate stop) and the run command exits 130 itself.
 *
 * @since 0.1.0
 * @category running
 */
export const main = (argv: ReadonlyArray<string>): void => {
  const fiber = Effect.runFork(plainWhenPiped(cli(argv)).pipe(Effect.provide(NodeContext.layer)))
  const keepAlive = setInterval(() => {}, 2 ** 31 - 1)
  const onSignal = (signal: NodeJS.Signals) => () => {
    // The runner's handler is installed: let it stop the run gracefully.
    if (signalGovernor.runnerGoverns && process.listenerCount(signal) > 1) return
    fiber.unsafeInterruptAsFork(FiberId.none)
  }
  const onInt = onSignal("SIGINT")
  const onTerm = onSignal("SIGTERM")
  process.on("SIGINT", onInt)
  process.on("SIGTERM", onTerm)
  fiber.addObserver((exit) => {
    clearInterval(keepAlive)
    process.off("SIGINT", onInt)
    process.off("SIGTERM", onTerm)
    process.exit(exitCodeOf(exit, (line) => process.stderr.write(`${line}\n`)))
  })
}

if (import.meta.url === `file://${process.argv[1]}`) main(process.argv)
