/**
 * The runner's only contact with process signals: for the life of the current scope it claims
 * the stop signals from the `Signals` service (the one owner of `process` listeners) and turns
 * each into `requestStop(reason)`.
 *
 * @internal
 */
import { Effect, type Scope } from "effect"
import * as Signals from "../../Signals.js"

/**
 * The signals that stop a run gracefully: Ctrl-C (SIGINT), a service manager or `kill`
 * (SIGTERM), and the terminal closing (SIGHUP). The stop reason is the signal's name in lower
 * case (`sigint`, `sigterm`, `sighup`).
 *
 * @internal
 */
export const stopSignals: ReadonlyArray<NodeJS.Signals> = Signals.stopSignals

/**
 * Calls `requestStop(signal name in lower case)` on each of {@link stopSignals} until the
 * scope closes (the claim on `Signals` is given back then).
 *
 * @internal
 */
export const onStopSignal = (requestStop: (reason: string) => void): Effect.Effect<void, never, Scope.Scope> =>
  Effect.flatMap(
    Signals.Signals,
    (signals) => signals.handle((signal) => Effect.sync(() => requestStop(signal.toLowerCase())))
  )
