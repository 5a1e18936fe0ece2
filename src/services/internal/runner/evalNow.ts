/**
 * An Effect task's attempt evaluated at once, on the caller's stack, without a fiber (issue 19
 * §5): what the runner's fast path (`runNow`) does with the first attempt of each `Task.make`
 * task of a plain pipeline.
 *
 * Running such an attempt on a fiber costs the fiber (an id, a copy of the run's FiberRefs, its
 * run loop and its end) and a dozen fiber steps around a body that, in the common case
 * (`Effect.sync(...)`, or `Effect.map(ctx.acquire(), ...)` on a free slot), never waits. This
 * module steps through the Effect primitives such a body is made of, exactly as Effect 3.22's
 * fiber run loop does (`FiberRuntime.runLoop` and its `contOpSuccess`):
 * - `Success`, `Sync`, `Commit` (`Effect.suspend`, `Effect.gen`'s start), `OnSuccess`
 *   (`Effect.flatMap`, `Effect.map`, …), `Iterator` (`Effect.gen`), `Tag` (a service of the
 *   run's context), `Right`/`Some`, and `Left`/`None` (as the fiber turns them into failures);
 * - `Failure`: the attempt fails with its cause (the only frames kept are `OnSuccess` and
 *   `Iterator` ones, which a failure skips, as a fiber's does);
 * - a `WithRuntime` step marked by `holdNow.ts` ({@link WithHolderTypeId}: a pool's scoped
 *   acquire), given the attempt's synchronous holder as the fiber would have found it;
 * - a throw from user code: the same failure the fiber makes of it (`Effect.die`).
 *
 * Any other step (a wait, a fiber's runtime, runtime flags, error handlers, `Effect.yieldNow`),
 * or more than {@link MAX_STEPS} steps, ends the evaluation with what is left: the step it
 * stopped at followed by the frames not run yet, as one Effect ({@link Pending}), which the
 * runner then runs on a fiber as the rest of the same attempt. Nothing runs twice: every step
 * taken had its result kept, and the rest starts at the first step not taken.
 *
 * This relies on Effect's internals (its primitives' `_op` and fields): the module's tests
 * (test/services/internal/runner/evalNow.test.ts) check each step against a fiber's result, so
 * an Effect upgrade that changes them fails there first.
 *
 * @internal
 */
import { Cause, Context, Effect, Exit, FiberId } from "effect"
import { yieldWrapGet } from "effect/Utils"
import { type SyncHolder, WithHolderTypeId } from "../holdNow.js"

/**
 * Whether this Effect build lays its primitives out as this module reads them (Effect 3.22:
 * `_op` and `effect_instruction_i0`/`_i1`), checked once on probes. When it does not (a
 * release that changed them), {@link evalNow} evaluates nothing and hands every Effect to a
 * fiber whole: slower, never wrong.
 *
 * @internal
 */
export const layoutKnown: boolean = (() => {
  try {
    const value = {}
    const thunk = () => value
    const next = (_: unknown) => Effect.void
    const succeed = Effect.succeed(value) as unknown as Primitive
    const sync = Effect.sync(thunk) as unknown as Primitive
    const chained = Effect.flatMap(Effect.void, next) as unknown as Primitive
    const failed = Exit.fail(value) as unknown as Primitive
    return succeed._op === "Success" && succeed.effect_instruction_i0 === value &&
      sync._op === "Sync" && sync.effect_instruction_i0 === thunk &&
      chained._op === "OnSuccess" && chained.effect_instruction_i1 === next &&
      failed._op === "Failure"
  } catch {
    return false
  }
})()

/**
 * The steps one evaluation takes at most before it hands the rest to a fiber (a fiber yields
 * to others every 2048 steps: a body that loops without waiting is then stoppable there).
 *
 * @internal
 */
export const MAX_STEPS = 1024

/**
 * What is left of an evaluation that stopped before its end: one Effect, to run on a fiber
 * (see the module docs).
 *
 * @internal
 */
export class Pending<A, E> {
  constructor(readonly effect: Effect.Effect<A, E>) {}
}

/**
 * What gives a marked `WithRuntime` step its holder: the synchronous holder the fiber running
 * the evaluated Effect would find in its Scope now (see `holdNow.ts`), or `undefined`.
 *
 * @internal
 */
export interface HolderSource {
  readonly holderNow: () => SyncHolder | undefined
}

/**
 * A {@link HolderSource} for a context whose Scope never holds a finalizer synchronously.
 *
 * @internal
 */
export const neverHolds: HolderSource = { holderNow: () => undefined }

/** An Effect primitive as Effect 3.22 builds one (see the module docs). */
interface Primitive {
  readonly _op: string
  readonly effect_instruction_i0: any
  readonly effect_instruction_i1: any
  readonly commit?: () => Primitive
  readonly right?: unknown
  readonly left?: unknown
  readonly value?: unknown
}

/** What the fiber makes of a throw (`FiberRuntime.runLoop`'s `catch`). */
const thrown = (e: unknown): Primitive =>
  (Cause.isInterruptedException(e)
    ? Exit.failCause(Cause.sequential(Cause.die(e), Cause.interrupt(FiberId.none)))
    : Effect.die(e)) as unknown as Primitive

/**
 * Resumes a generator frame (`Effect.gen`) with `value`, as the fiber's `Iterator`
 * continuation does: the next yielded Effect (its frame pushed back on `stack`), or an Exit
 * (its end, or a yielded Exit's failure).
 */
const resume = (frame: Primitive, value: unknown, stack: Array<Primitive>): Primitive => {
  const iterator = frame.effect_instruction_i0 as Iterator<unknown>
  while (true) {
    let next: Primitive
    try {
      const state = iterator.next(value)
      if (state.done === true) return Exit.succeed(state.value) as unknown as Primitive
      next = yieldWrapGet(state.value as never) as Primitive
    } catch (e) {
      return thrown(e)
    }
    if (!Exit.isExit(next)) {
      stack.push(frame)
      return next
    }
    if (next._op === "Failure") return next
    value = next.effect_instruction_i0
  }
}

/** The rest of a generator frame as an Effect of its own: resumed with the value it waits for. */
const resumed = (frame: Primitive) => (value: unknown): Effect.Effect<unknown, unknown> =>
  Effect.suspend(() => {
    const stack: Array<Primitive> = []
    const next = resume(frame, value, stack)
    return (stack.length === 0 ? next : Effect.flatMap(next as never, resumed(frame))) as Effect.Effect<unknown, unknown>
  })

/** `cur` followed by the frames of `stack` not run yet (innermost first), as one Effect. */
const rest = (cur: Primitive, stack: ReadonlyArray<Primitive>): Pending<unknown, unknown> => {
  let effect = cur as unknown as Effect.Effect<unknown, unknown>
  for (let i = stack.length - 1; i >= 0; i--) {
    const frame = stack[i]!
    effect = Effect.flatMap(effect, frame._op === "OnSuccess" ? frame.effect_instruction_i1 : resumed(frame))
  }
  return new Pending(effect)
}

/**
 * Evaluates `effect` at once (see the module docs): its Exit when it ended, or what is left
 * ({@link Pending}) when it stopped at a step that needs a fiber. `context` is the context the
 * fiber would run it in (its `Tag` steps read it); `holder` gives the synchronous holder a
 * marked `WithRuntime` step would find in that fiber (`undefined`: such steps need a fiber too;
 * a source is asked at that step, as the fiber would be).
 *
 * @internal
 */
export const evalNow = <A, E>(
  effect: Effect.Effect<A, E>,
  context: Context.Context<never>,
  holder: HolderSource | undefined
): Exit.Exit<A, E> | Pending<A, E> => {
  if (!layoutKnown) return new Pending(effect)
  const stack: Array<Primitive> = []
  let cur = effect as unknown as Primitive
  let steps = 0
  while (true) {
    if (++steps > MAX_STEPS) return rest(cur, stack) as Pending<A, E>
    let value: unknown
    switch (cur._op) {
      case "Success":
        value = cur.effect_instruction_i0
        break
      case "Failure":
        return cur as unknown as Exit.Exit<A, E>
      case "Sync":
        try {
          value = cur.effect_instruction_i0()
        } catch (e) {
          cur = thrown(e)
          continue
        }
        break
      case "Commit":
        try {
          cur = cur.commit!()
        } catch (e) {
          cur = thrown(e)
        }
        continue
      case "OnSuccess":
        stack.push(cur)
        cur = cur.effect_instruction_i0
        continue
      case "Iterator":
        cur = resume(cur, undefined, stack)
        continue
      case "Tag":
        try {
          value = Context.unsafeGet(context, cur as never)
        } catch (e) {
          cur = thrown(e)
          continue
        }
        break
      case "Right":
        value = cur.right
        break
      case "Some":
        value = cur.value
        break
      case "Left":
        cur = Effect.fail(cur.left) as unknown as Primitive
        continue
      case "None":
        cur = Effect.fail(new Cause.NoSuchElementException()) as unknown as Primitive
        continue
      case "WithRuntime": {
        const now = cur.effect_instruction_i0[WithHolderTypeId] as ((holder: SyncHolder | undefined) => Primitive) | undefined
        if (now === undefined || holder === undefined) return rest(cur, stack) as Pending<A, E>
        try {
          cur = now(holder.holderNow())
        } catch (e) {
          cur = thrown(e)
        }
        continue
      }
      default:
        return rest(cur, stack) as Pending<A, E>
    }
    // a value: the next frame gets it
    const frame = stack.pop()
    if (frame === undefined) return Exit.succeed(value as A)
    if (frame._op === "OnSuccess") {
      try {
        cur = frame.effect_instruction_i1(value)
      } catch (e) {
        cur = thrown(e)
      }
    } else {
      cur = resume(frame, value, stack)
    }
  }
}
