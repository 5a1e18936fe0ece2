/**
 * The process's stop signals as a service: Ctrl-C (`SIGINT`), a service manager or `kill`
 * (`SIGTERM`) and the terminal closing (`SIGHUP`). This module is the one place in assay that
 * listens to the process's signals (`process.on`); everything else (the CLI's main program, the
 * runner's graceful stop, the shard parent's relay, `assay mock-llm`) claims them here.
 *
 * Claims nest: while a claim is held, every stop signal goes to the **newest** claim only, the
 * way an inner handler takes over from an outer one. The CLI's main program claims the signals
 * for its whole life to interrupt the command (exit 130); a run with signal handling claims them
 * while it runs (first signal: graceful stop with the grace period; second: immediate stop), so
 * a signal then stops the run through the runner instead of interrupting the program; when the
 * run's claim ends, signals go back to the main program.
 *
 * The process listeners are installed while at least one claim is held and removed with the
 * last one: with no claim, a signal gets Node's default action.
 *
 * `Signals` is a `Context.Reference`: code that never provides it (a user's own program running
 * the `Runner`) gets one process-wide instance listening to the real process; tests provide
 * {@link makeTest}'s instance and send signals to it.
 *
 * @since 0.1.0
 */
import { Context, Effect, Fiber, Queue, Stream } from "effect"
import type { Scope } from "effect"

/**
 * A signal that stops assay: `SIGINT` (Ctrl-C), `SIGTERM` (`kill`, a service manager), `SIGHUP`
 * (the terminal closed).
 *
 * @since 0.1.0
 * @category models
 */
export type StopSignal = "SIGINT" | "SIGTERM" | "SIGHUP"

/**
 * The stop signals, in the order they are listened to.
 *
 * @since 0.1.0
 * @category constants
 */
export const stopSignals: ReadonlyArray<StopSignal> = ["SIGINT", "SIGTERM", "SIGHUP"]

/**
 * Where signals come from: the process (`process.on` / `process.off`), or a test's emitter.
 *
 * @since 0.1.0
 * @category models
 */
export interface SignalSource {
  readonly on: (signal: StopSignal, listener: () => void) => void
  readonly off: (signal: StopSignal, listener: () => void) => void
}

/**
 * The signals service.
 *
 * - `claim`: from now until the current scope closes, the stop signals go to the returned
 *   queue (and to no older claim). Listening has started when it returns. A queue keeps the
 *   last 16 signals not yet taken.
 * - `handle(onSignal)`: `claim`, with `onSignal` run (in a fiber of the current scope) for each
 *   signal, one after the other.
 *
 * @since 0.1.0
 * @category models
 */
export interface SignalsService {
  readonly claim: Effect.Effect<Queue.Dequeue<StopSignal>, never, Scope.Scope>
  readonly handle: (onSignal: (signal: StopSignal) => Effect.Effect<void>) => Effect.Effect<void, never, Scope.Scope>
}

/**
 * Builds a signals service over `source`: the source's listeners are on while at least one
 * claim is held.
 *
 * @param source where signals come from ({@link processSource} for the real process)
 * @since 0.1.0
 * @category constructors
 */
export const make = (source: SignalSource): SignalsService => {
  // newest last; a signal goes to the last one
  const claims: Array<Queue.Queue<StopSignal>> = []
  const listeners = stopSignals.map((signal) =>
    [signal, () => {
      const newest = claims[claims.length - 1]
      if (newest !== undefined) Queue.unsafeOffer(newest, signal)
    }] as const
  )
  const claim: SignalsService["claim"] = Effect.acquireRelease(
    Effect.flatMap(Queue.sliding<StopSignal>(16), (queue) =>
      Effect.sync(() => {
        if (claims.length === 0) for (const [signal, listener] of listeners) source.on(signal, listener)
        claims.push(queue)
        return queue as Queue.Dequeue<StopSignal>
      })),
    (queue) =>
      Effect.zipRight(
        Effect.sync(() => {
          const i = claims.lastIndexOf(queue as Queue.Queue<StopSignal>)
          if (i >= 0) claims.splice(i, 1)
          if (claims.length === 0) for (const [signal, listener] of listeners) source.off(signal, listener)
        }),
        Queue.shutdown(queue)
      )
  )
  const handle: SignalsService["handle"] = (onSignal) =>
    Effect.flatMap(
      claim,
      (queue) => Effect.forkScoped(Effect.interruptible(Stream.runForEach(Stream.fromQueue(queue), onSignal)))
    ).pipe(Effect.asVoid)
  return { claim, handle }
}

/**
 * The real process as a {@link SignalSource} (`process.on` / `process.off`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const processSource: SignalSource = {
  on: (signal, listener) => void process.on(signal, listener),
  off: (signal, listener) => void process.off(signal, listener)
}

/**
 * The signals service. Without a provided one, the process-wide instance over the real
 * process ({@link processSource}).
 *
 * @since 0.1.0
 * @category tags
 */
export class Signals extends Context.Reference<Signals>()("assay/Signals", {
  defaultValue: (): SignalsService => make(processSource)
}) {}

/**
 * Keeps the stop signals from killing the process once its main program has ended: listeners
 * that do nothing, on `source` (the real process by default), until the returned function
 * removes them. Without them, a signal arriving between the release of the last claim and the
 * process's `exit` (a second Ctrl-C during a graceful stop that has just finished) would take
 * Node's default action and kill the process by the signal, losing the exit code (130) that the
 * finished program chose.
 *
 * @param source where signals come from (default: the real process)
 * @returns a function that removes the listeners (idempotent)
 * @since 0.1.0
 * @category running
 */
export const absorb = (source: SignalSource = processSource): (() => void) => {
  const ignore = () => {}
  for (const signal of stopSignals) source.on(signal, ignore)
  let removed = false
  return () => {
    if (removed) return
    removed = true
    for (const signal of stopSignals) source.off(signal, ignore)
  }
}

/**
 * A fresh signals service over the real process (the CLI's main program provides one, so that
 * no instance is shared with another copy of assay in the same process).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeProcess = (): SignalsService => make(processSource)

/**
 * A signals service for tests, its `source` (for {@link absorb}), and `send(signal)`, which
 * delivers a signal as the process would; `send` returns whether anything listened (`false`:
 * nothing listened, so a real process would have taken Node's default action).
 *
 * @since 0.1.0
 * @category testing
 */
export const makeTest = (): {
  readonly signals: SignalsService
  readonly send: (signal: StopSignal) => Effect.Effect<boolean>
  readonly source: SignalSource
} => {
  const listeners = new Map<StopSignal, Set<() => void>>()
  const source: SignalSource = {
    on: (signal, listener) => {
      const set = listeners.get(signal) ?? new Set()
      set.add(listener)
      listeners.set(signal, set)
    },
    off: (signal, listener) => void listeners.get(signal)?.delete(listener)
  }
  return {
    signals: make(source),
    source,
    send: (signal) =>
      Effect.sync(() => {
        const set = listeners.get(signal)
        if (set === undefined || set.size === 0) return false
        for (const listener of Array.from(set)) listener()
        return true
      })
  }
}

/**
 * Runs `program` (in a child fiber) as a main program stopped by the stop signals: a signal
 * that no newer claim takes (see {@link SignalsService}) interrupts it. The caller's own
 * interruption waits for the program instead of cutting it: `NodeRuntime.runMain` interrupts
 * its main fiber on SIGINT/SIGTERM whatever else listens, and under `interruptOnStop` that
 * interruption stays pending until the program has finished, so a run that holds the signals
 * stops gracefully and prints its report first. Fails and succeeds as `program` does.
 *
 * @param program the main program
 * @since 0.1.0
 * @category running
 */
export const interruptOnStop = <A, E, R>(program: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.scoped(Effect.gen(function*() {
      const signals = yield* Signals
      // claimed before the program starts: a signal that comes at once still interrupts it
      const queue = yield* signals.claim
      // Not a child of the caller's fiber: Effect passes an interruption on to a fiber's
      // children at once, even while the fiber itself is uninterruptible.
      const fiber = yield* Effect.forkIn(restore(program), yield* Effect.scope)
      yield* Effect.forkScoped(
        Effect.interruptible(Stream.runForEach(Stream.fromQueue(queue), () => Fiber.interruptFork(fiber)))
      )
      return yield* Fiber.join(fiber)
    }))
  )
