/**
 * Running an assay program as a Node process's main program, with the CLI's exit codes.
 *
 * `NodeRuntime.runMain` from `@effect/platform-node` turns Ctrl-C (SIGINT/SIGTERM) into an
 * interruption of the main fiber, which closes every scope (a run is closed as
 * `interrupted`, subprocesses are reaped), but then exits **0**: interruption counts as
 * success in its default teardown. {@link runMain} is the same runner with assay's teardown:
 * 0 success, 1 failure (printed), 2 invalid configuration, 75 store held by another writer,
 * 130 interrupted (a line saying so on stderr).
 *
 * @since 0.1.0
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import type { Effect } from "effect"
import { Cause, Exit } from "effect"
import { exitCodeOf } from "../domain/ExitCode.js"
import { afterStdioDrained } from "./internal/flushStdio.js"

/**
 * A teardown for `NodeRuntime.runMain`: exits with {@link exitCodeOf}'s code (0 / 1 / 2 / 75 /
 * 130), printing a failure's message, a defect's cause, or `interrupted (resumable: run the
 * program again)` to stderr.
 *
 * @since 0.1.0
 * @category running
 */
export const teardown = <E, A>(exit: Exit.Exit<E, A>, onExit: (code: number) => void): void => {
  const print = (line: string) => void process.stderr.write(`${line}\n`)
  if (Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)) {
    print("interrupted (resumable: run the program again)")
  }
  const code = exitCodeOf(exit, print)
  // output still queued for a slow pipe reader would be cut by an immediate exit
  afterStdioDrained(() => onExit(code))
}

/**
 * Runs `effect` as the process's main program (`NodeRuntime.runMain` with {@link teardown}):
 * SIGINT/SIGTERM interrupt it, its scopes close (an assay run is recorded `interrupted`,
 * resumable), and the process exits 0 / 1 / 2 / 75 / 130.
 *
 * @param effect the program, with every requirement provided
 * @since 0.1.0
 * @category running
 */
export const runMain = <A, E>(effect: Effect.Effect<A, E>): void =>
  NodeRuntime.runMain(effect, { disableErrorReporting: true, teardown })
