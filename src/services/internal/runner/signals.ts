/**
 * The runner's only contact with process signals: one small function that calls
 * `requestStop(reason)` on SIGINT / SIGTERM / SIGHUP for the life of the current scope.
 *
 * @internal
 */
import { Effect, type Scope } from "effect"

/**
 * The signals that stop a run gracefully: Ctrl-C (SIGINT), a service manager or `kill`
 * (SIGTERM), and the terminal closing (SIGHUP). The stop reason is the signal's name in lower
 * case (`sigint`, `sigterm`, `sighup`).
 *
 * @internal
 */
export const stopSignals: ReadonlyArray<NodeJS.Signals> = ["SIGINT", "SIGTERM", "SIGHUP"]

/**
 * Calls `requestStop(signal name in lower case)` on each of {@link stopSignals} until the
 * scope closes (the handlers are removed then).
 *
 * @internal
 */
export const onStopSignal = (requestStop: (reason: string) => void): Effect.Effect<void, never, Scope.Scope> =>
  Effect.asVoid(Effect.acquireRelease(
    Effect.sync(() =>
      stopSignals.map((signal) => {
        const handler = () => requestStop(signal.toLowerCase())
        process.on(signal, handler)
        return [signal, handler] as const
      })
    ),
    (handlers) =>
      Effect.sync(() => {
        for (const [signal, handler] of handlers) process.off(signal, handler)
      })
  ))
