/**
 * What the cluster submitter says when runners refused its pipelines (`submit.ts`
 * `refusedError`), in a module of its own without the cluster packages, so that a command of
 * the CLI's fast start (`study run`) can recognise the refusal and say what it means for it.
 *
 * @internal
 */
import type { ConfigError } from "../../../domain/Errors.js"

/**
 * The refusal's issue message (at `--config`): how {@link isRunnersRefused} knows it.
 *
 * @internal
 */
export const RUNNERS_REFUSED = "the runners host another experiment, or another definition of it"

/**
 * The advice closing the refusal's message, said once: what to do about it.
 *
 * @internal
 */
export const REFUSAL_ADVICE = "Start every runner with the submitter's file (assay runner -c FILE --database URL), or " +
  "restart them if they were started before the file changed (a runner reads its file when it starts), then submit again " +
  "(the refused pipelines are left interrupted, resumable)."

/**
 * Whether `e` is the submitter's refusal (runners refused its pipelines).
 *
 * @param e any failure
 * @returns `true` for the `ConfigError` of `refusedError`
 * @internal
 */
export const isRunnersRefused = (e: unknown): e is ConfigError =>
  (e as { _tag?: unknown } | null)?._tag === "ConfigError" &&
  ((e as { issues?: ReadonlyArray<{ readonly message?: unknown }> }).issues ?? []).some((i) => i.message === RUNNERS_REFUSED)
