/**
 * Process exit codes of the `assay` CLI (and of programs run with `NodeMain.runMain`) and the
 * teardown that maps an Effect `Exit` to them.
 *
 * The stock `NodeRuntime.runMain` teardown exits 0 after Ctrl-C (interruption counts as
 * success) and 1 for everything else; assay needs 0 / 1 / 2 / 75 / 130 (see `docs/cli.md`).
 *
 * @since 0.1.0
 */
import * as ValidationError from "@effect/cli/ValidationError"
import { Cause, Exit, Option } from "effect"
import { isConfigFamily, isLoginRefusedError, isStoreLocked } from "./Errors.js"
import { messageOf } from "./internal/errors.js"

/**
 * The exit codes: 0 everything succeeded (or was skipped), 1 some pipelines failed, 2 invalid
 * configuration or identity conflict (nothing ran), 75 the store or suite root is held by
 * another writer (nothing ran; try again when it is done: `EX_TEMPFAIL` of BSD `sysexits.h`),
 * 130 interrupted (resumable).
 *
 * @since 0.1.0
 * @category constants
 */
export const ExitCode = {
  Success: 0,
  Failures: 1,
  Invalid: 2,
  Locked: 75,
  Interrupted: 130
} as const

/**
 * A command's request to end the process with a given exit code after it has printed what it
 * had to say (for example `run` exiting 1 because some pipelines failed).
 *
 * @since 0.1.0
 * @category errors
 */
export class ExitWith {
  readonly _tag = "ExitWith"
  constructor(readonly code: number) {}
}

/**
 * Chooses the exit code for a finished CLI program: success → 0; interruption only → 130;
 * an {@link ExitWith} → its code; a CLI validation error, a config-family error or a database
 * login the server refused (`StoreUnavailable` with `loginRefused: true`) → 2; a store
 * held by another writer (`StoreUnavailable` with `locked: true`) → 75; any
 * other failure → 1 (printed); a defect → 1 (printed with its cause).
 *
 * @since 0.1.0
 * @category teardown
 */
export const exitCodeOf = (exit: Exit.Exit<unknown, unknown>, print: (line: string) => void): number => {
  if (Exit.isSuccess(exit)) return ExitCode.Success
  if (Cause.isInterruptedOnly(exit.cause)) return ExitCode.Interrupted
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) {
    const e = failure.value
    if (e instanceof ExitWith) return e.code
    if (ValidationError.isValidationError(e)) return ExitCode.Invalid
    if (isConfigFamily(e) || isLoginRefusedError(e)) {
      print(`error: ${messageOf(e)}`)
      return ExitCode.Invalid
    }
    if (isStoreLocked(e)) {
      print(`error: ${messageOf(e)}`)
      return ExitCode.Locked
    }
    print(`error: ${messageOf(e)}`)
    return ExitCode.Failures
  }
  if (Cause.isInterrupted(exit.cause) && !Cause.isDie(exit.cause)) return ExitCode.Interrupted
  print(Cause.pretty(exit.cause))
  return ExitCode.Failures
}
