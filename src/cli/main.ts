/**
 * The `assay` command-line program: the root command, its subcommands, and a teardown that
 * gives the documented exit codes (0 / 1 / 2 / 130).
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { exitCodeOf } from "./Exit.js"
import { exportCommand } from "./ExportCommand.js"
import { merge } from "./MergeCommand.js"
import { mockLlm } from "./MockLlmCommand.js"
import { report } from "./ReportCommand.js"

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
  Command.withSubcommands([mockLlm, report, exportCommand, merge])
)

/**
 * Parses `argv` (as `process.argv`, with the node and script entries first) and runs the
 * chosen command.
 *
 * @since 0.1.0
 * @category running
 */
export const cli = Command.run(assay, { name: "assay", version: "0.1.0" })

if (import.meta.url === `file://${process.argv[1]}`) {
  cli(process.argv).pipe(
    Effect.provide(NodeContext.layer),
    NodeRuntime.runMain({
      disableErrorReporting: true,
      teardown: (exit, onExit) => onExit(exitCodeOf(exit, (line) => process.stderr.write(`${line}\n`)))
    })
  )
}
