/**
 * The CLI's exit codes and teardown; they live in `domain/ExitCode.ts`, shared with
 * `layers/NodeMain.ts` (the same codes for a user's own program).
 *
 * @since 0.1.0
 */
export { ExitCode, exitCodeOf, ExitWith } from "../domain/ExitCode.js"
