/**
 * The CLI's exit codes and teardown; they live in `domain/ExitCode.ts`, shared with
 * `layers/NodeMain.ts` (the same codes for a user's own program).
 *
 * @since 0.1.0
 */
import { shellQuote } from "../services/internal/processRunner.js"

export { ExitCode, exitCodeOf, ExitWith } from "../domain/ExitCode.js"

/**
 * The command that resumes an interrupted run, from the arguments the user gave
 * (`process.argv.slice(2)`): the same command line with `run` turned into `resume` and
 * `--run-id` dropped (a new run gets a new id); `--stop-after` too, as it bounded that run.
 *
 * @since 0.1.0
 * @category messages
 */
export const resumeCommandOf = (argv: ReadonlyArray<string>): string => {
  const out: Array<string> = ["assay"]
  let commandSeen = false
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!
    if (!commandSeen && (a === "run" || a === "resume")) {
      out.push("resume")
      commandSeen = true
      continue
    }
    if (a === "--run-id" || a === "--stop-after") {
      i++
      continue
    }
    if (a.startsWith("--run-id=") || a.startsWith("--stop-after=")) continue
    out.push(shellQuote(a))
  }
  return out.join(" ")
}
