/**
 * What an Effect task's attempt runs in: its own `Scope` and Effect's `Random` seeded with the
 * attempt's seed, without changing the fiber's context per attempt (issue 19 §5).
 *
 * Providing a `Scope` (and the attempt's generator) in the fiber's context for every attempt
 * costs two copies of the fiber's `FiberRefs` and of its `Context`, the release machinery of
 * `Effect.locally`, and a `Scope` whether the task uses one or not: about 15 µs of CPU per
 * attempt in bench/runner.ts, a third of what a leased attempt costs. Here the run's fibers
 * carry, once per run ({@link withAttemptServices}):
 * - one {@link AttemptScope} as the context's `Scope`: it adds finalizers to (and forks) the
 *   scope of the attempt the calling fiber runs, or the Scope it replaced outside attempts. An
 *   attempt that never touches its Scope allocates none; its first finalizer (a lease's
 *   release, usually the only one) is held as it is and run at the attempt's end; a real
 *   Scope is made only for a second finalizer, a child scope or a scoped fork;
 * - one {@link AttemptRandom} as the default `Random`: it draws from the generator of the
 *   calling fiber's attempt, built from the attempt's seed the first time the attempt draws,
 *   or from the Random it replaced outside attempts;
 * - a fiber-local {@link AttemptCell} ({@link currentAttempt}) naming the fiber's running
 *   attempt, set and restored by {@link attemptScoped} (a field write, no context change).
 *   A fiber forked inside an attempt gets a cell of its own naming that same attempt (the
 *   FiberRef's `fork`), so it draws from its attempt's generator and adds finalizers to its
 *   attempt's scope even after a later attempt of its parent began; joining a fiber never
 *   changes its parent's cell.
 *
 * `AttemptScope` implements Effect's `Scope` protocol as Effect 3.22 calls it on the context's
 * Scope: the methods `addFinalizer` and `fork` (`Scope.addFinalizer`, `Effect.acquireRelease`,
 * `Scope.fork`), delegated to the attempt's real Scope through the public functions, and the
 * `state` field that `Effect.forkIn` (hence `Effect.forkScoped`) reads and changes directly,
 * the real Scope's own, found through the fiber running at that moment. This relies on
 * Effect's internals: test/services/internal/runner/attemptScope.test.ts checks each of these
 * uses (finalizers with the attempt's exit on success, failure and interruption, a scoped fork
 * interrupted at the attempt's end, a fiber forked into an attempt that outlives it), so an
 * Effect upgrade that changes the protocol fails there first.
 *
 * @internal
 */
import { Cause, Context, Effect, Exit, Fiber, FiberRef, Random, Scope } from "effect"
import type * as Chunk from "effect/Chunk"
import * as DefaultServices from "effect/DefaultServices"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import { globalValue } from "effect/GlobalValue"
import { pipeArguments } from "effect/Pipeable"
import { type HoldNow, HoldNowTypeId, type SyncHolder } from "../holdNow.js"

/**
 * One attempt's services, each made on first use: its generator (from its seed; `seed` is
 * read once) and its scope (closed with the attempt's exit by {@link attemptScoped} or
 * {@link attemptExit}). It is also the {@link SyncHolder} of its attempt's first finalizer when
 * that one is synchronous (a pool lease's release: see `holdNow.ts`).
 *
 * @internal
 */
export class AttemptGenerator implements SyncHolder {
  #random: Random.Random | undefined = undefined
  /** The attempt's only finalizer so far, held without a Scope (most attempts add one or none). */
  #held: Scope.Scope.Finalizer | undefined = undefined
  /** The same, when it is synchronous (given through {@link hold}): run without an Effect. */
  #heldNow: (() => void) | undefined = undefined
  #scope: Scope.CloseableScope | undefined = undefined
  #closed: Exit.Exit<unknown, unknown> | undefined = undefined
  readonly #seed: { readonly seed: number }
  /** @param seed what holds the attempt's seed (the attempt's context: `seed` is read on the first draw) */
  constructor(seed: { readonly seed: number }) {
    this.#seed = seed
  }
  get random(): Random.Random {
    return this.#random ??= Random.make(this.#seed.seed)
  }
  /** Whether {@link hold} can take a finalizer now: the attempt runs and holds none yet. */
  get canHoldNow(): boolean {
    return this.#closed === undefined && this.#scope === undefined && this.#held === undefined &&
      this.#heldNow === undefined
  }
  /** This attempt as the holder of a synchronous finalizer, when {@link canHoldNow}; else `undefined`. */
  holderNow(): SyncHolder | undefined {
    return this.canHoldNow ? this : undefined
  }
  /** Holds a synchronous finalizer (only when {@link canHoldNow}), run when the attempt ends. */
  hold(release: () => void): void {
    this.#heldNow = release
  }
  /**
   * Adds a finalizer, run with the attempt's exit when it ends (last added first); after the
   * attempt ended, runs it at once with that exit, as a closed Scope would.
   */
  addFinalizer(finalizer: Scope.Scope.Finalizer): Effect.Effect<void> {
    if (this.#closed !== undefined) return finalizer(this.#closed)
    if (this.#scope !== undefined) return Scope.addFinalizerExit(this.#scope, finalizer)
    if (this.#held === undefined && this.#heldNow === undefined) {
      this.#held = finalizer
      return Effect.void
    }
    return Effect.flatMap(this.scope, (scope) => Scope.addFinalizerExit(scope, finalizer))
  }
  /**
   * The attempt's Scope, made now if it has none yet, holding the finalizer held so far (closed
   * at once if the attempt ended).
   */
  get scope(): Effect.Effect<Scope.CloseableScope> {
    const scope = this.#scope
    if (scope !== undefined) return Effect.succeed(scope)
    return Effect.flatMap(Scope.make(), (made) => {
      // (a fiber of the attempt may have made one meanwhile: the first one wins)
      if (this.#scope !== undefined) return Effect.succeed(this.#scope)
      this.#scope = made
      const held = this.#held
      const heldNow = this.#heldNow
      this.#held = undefined
      this.#heldNow = undefined
      const filled = held !== undefined
        ? Scope.addFinalizerExit(made, held)
        : heldNow !== undefined
        ? Scope.addFinalizer(made, Effect.sync(heldNow))
        : Effect.void
      // asked after the attempt ended (a fiber it forked): the scope is closed already, so a
      // finalizer added to it runs at once, as with a closed Scope
      return Effect.as(this.#closed === undefined ? filled : Effect.zipRight(filled, Scope.close(made, this.#closed)), made)
    })
  }
  /**
   * The attempt's scope, now (see {@link AttemptScope.state}; rare: a fiber forked into the
   * attempt's scope before a second finalizer was added).
   */
  scopeNow(): Scope.CloseableScope {
    return this.#scope ?? Effect.runSync(this.scope)
  }
  /** Ends the attempt: runs its finalizers (its scope's, or the one held) with `exit`. */
  close(exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> {
    return this.closeNow(exit) ?? Effect.void
  }
  /**
   * {@link close}, with `undefined` when it is done already: nothing held, or a synchronous
   * finalizer, which has run (one that throws is a defect of the close, as in `Effect.sync`).
   */
  closeNow(exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> | undefined {
    if (this.#closed !== undefined) return undefined
    this.#closed = exit
    if (this.#scope !== undefined) return Scope.close(this.#scope, exit)
    const heldNow = this.#heldNow
    if (heldNow !== undefined) {
      this.#heldNow = undefined
      try {
        heldNow()
      } catch (defect) {
        return Effect.die(defect)
      }
      return undefined
    }
    const held = this.#held
    this.#held = undefined
    return held === undefined ? undefined : held(exit)
  }
}

/**
 * The attempt a fiber runs (`undefined` outside attempts): mutable, one per fiber.
 *
 * @internal
 */
export class AttemptCell {
  constructor(public current: AttemptGenerator | undefined) {}
}

/** The cell of fibers outside any run (never written: {@link attemptScoped} checks). */
const rootCell = new AttemptCell(undefined)

/**
 * The calling fiber's {@link AttemptCell}. A forked fiber gets a new cell naming its parent's
 * attempt at the fork; a join keeps the parent's cell.
 *
 * @internal
 */
export const currentAttempt: FiberRef.FiberRef<AttemptCell> = globalValue(
  Symbol.for("assay/internal/runner/currentAttempt"),
  () =>
    FiberRef.unsafeMake(rootCell, {
      fork: (parent) => new AttemptCell(parent.current),
      join: (parent) => parent
    })
)

/**
 * A `Random` that draws from the generator of the attempt the calling fiber runs, or from
 * `outside` when it runs none.
 *
 * @internal
 */
export class AttemptRandom implements Random.Random {
  readonly [Random.RandomTypeId]: Random.RandomTypeId = Random.RandomTypeId
  readonly #outside: Random.Random
  constructor(outside: Random.Random) {
    this.#outside = outside
  }
  #with<A>(f: (random: Random.Random) => Effect.Effect<A>): Effect.Effect<A> {
    return FiberRef.getWith(currentAttempt, (cell) => f(cell.current === undefined ? this.#outside : cell.current.random))
  }
  get next(): Effect.Effect<number> {
    return this.#with((r) => r.next)
  }
  get nextBoolean(): Effect.Effect<boolean> {
    return this.#with((r) => r.nextBoolean)
  }
  get nextInt(): Effect.Effect<number> {
    return this.#with((r) => r.nextInt)
  }
  nextRange(min: number, max: number): Effect.Effect<number> {
    return this.#with((r) => r.nextRange(min, max))
  }
  nextIntBetween(min: number, max: number): Effect.Effect<number> {
    return this.#with((r) => r.nextIntBetween(min, max))
  }
  shuffle<A>(elements: Iterable<A>): Effect.Effect<Chunk.Chunk<A>> {
    return this.#with((r) => r.shuffle(elements))
  }
}

/**
 * A `Scope` that stands for the scope of the attempt the calling fiber runs (made on first
 * use), or for `outside` when it runs none. Finalizers added through it outside attempts with
 * no `outside` scope are a bug of the runner (a defect).
 *
 * @internal
 */
export class AttemptScope implements Scope.Scope, HoldNow {
  readonly [Scope.ScopeTypeId]: Scope.ScopeTypeId = Scope.ScopeTypeId
  readonly strategy: ExecutionStrategy.ExecutionStrategy
  readonly #target: Effect.Effect<Scope.Scope>
  readonly #outside: Scope.Scope | undefined
  constructor(outside: Scope.Scope | undefined, strategy: ExecutionStrategy.ExecutionStrategy) {
    this.strategy = strategy
    this.#outside = outside
    this.#target = FiberRef.getWith(currentAttempt, (cell) =>
      cell.current !== undefined
        ? cell.current.scope
        : outside !== undefined
        ? Effect.succeed(outside)
        : Effect.dieMessage("a Scope was asked for outside an attempt, where the run provides none"))
  }
  /**
   * The attempt `fiber` runs, when it can hold a synchronous finalizer now (see `holdNow.ts`):
   * it runs and holds no finalizer yet. Outside attempts: `undefined`.
   */
  [HoldNowTypeId](fiber: Fiber.RuntimeFiber<unknown, unknown>): SyncHolder | undefined {
    const current = fiber.getFiberRef(currentAttempt).current
    return current !== undefined && current.canHoldNow ? current : undefined
  }
  /** Effect's Scope protocol: adds a finalizer to the attempt's (or the outside) scope. */
  addFinalizer(finalizer: Scope.Scope.Finalizer): Effect.Effect<void> {
    return FiberRef.getWith(currentAttempt, (cell) =>
      cell.current !== undefined
        ? cell.current.addFinalizer(finalizer)
        : Effect.flatMap(this.#target, (scope) => Scope.addFinalizerExit(scope, finalizer)))
  }
  /**
   * Effect's Scope protocol: the state of the target scope, which `Effect.forkIn` (hence
   * `Effect.forkScoped`) reads and changes directly, in the fiber that forks or, when the
   * forked fiber ends, in that fiber (both name the same attempt).
   */
  get state(): unknown {
    const fiber = Fiber.getCurrentFiber()
    const cell = fiber._tag === "Some" ? fiber.value.getFiberRef(currentAttempt) : rootCell
    const target = cell.current !== undefined ? cell.current.scopeNow() : this.#outside
    if (target === undefined) throw new Error("assay: a Scope was asked for outside an attempt, where the run provides none")
    return (target as unknown as { readonly state: unknown }).state
  }
  /** Effect's Scope protocol: a child scope of the target scope. */
  fork(strategy: ExecutionStrategy.ExecutionStrategy): Effect.Effect<Scope.CloseableScope> {
    return Effect.flatMap(this.#target, (scope) => Scope.fork(scope, strategy))
  }
  pipe() {
    return pipeArguments(this, arguments)
  }
}

/**
 * Runs `self` (the fiber that forks a run's pipeline fibers) with the attempt services: an
 * {@link AttemptRandom} as the default `Random`, an {@link AttemptScope} as the context's
 * `Scope` and a cell of its own ({@link currentAttempt}), each unless already there.
 *
 * @internal
 */
export const withAttemptServices = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime<A, E, R>((fiber) => {
    let out = self
    const context = fiber.currentContext
    const scope = Context.getOption(context as Context.Context<Scope.Scope>, Scope.Scope)
    if (!(scope._tag === "Some" && scope.value instanceof AttemptScope)) {
      const outside = scope._tag === "Some" ? scope.value : undefined
      out = Effect.provideService(out, Scope.Scope, new AttemptScope(outside, outside?.strategy ?? ExecutionStrategy.sequential))
    }
    if (fiber.getFiberRef(currentAttempt) === rootCell) out = Effect.locally(out, currentAttempt, new AttemptCell(undefined))
    const random = Context.get(fiber.currentDefaultServices, Random.Random)
    return random instanceof AttemptRandom ? out : Effect.withRandom(out, new AttemptRandom(random))
  })

/**
 * The attempt services of {@link withAttemptServices} installed in the calling fiber for the
 * rest of its life, each unless already there: the fiber's context gets an
 * {@link AttemptScope} as its `Scope`, a cell of its own ({@link currentAttempt}) and an
 * {@link AttemptRandom} as the default `Random`. Nothing is restored afterwards, so this is for
 * a fiber that runs nothing else after the work it was forked for (a cluster runner's task
 * execution, forked into the process's scope per task): the three `Effect.locally`-like
 * wrappers of {@link withAttemptServices} (each a copy of the fiber's `FiberRefs`, an
 * uninterruptible acquire and its release) are then three `FiberRef.set` (pg17z).
 *
 * @internal
 */
export const installAttemptServices: Effect.Effect<void> = Effect.withFiberRuntime<void>((fiber) => {
  let out: Effect.Effect<void> = Effect.void
  const context = fiber.currentContext
  const scope = Context.getOption(context as Context.Context<Scope.Scope>, Scope.Scope)
  if (!(scope._tag === "Some" && scope.value instanceof AttemptScope)) {
    const outside = scope._tag === "Some" ? scope.value : undefined
    out = FiberRef.set(
      FiberRef.currentContext,
      Context.add(context, Scope.Scope, new AttemptScope(outside, outside?.strategy ?? ExecutionStrategy.sequential))
    )
  }
  if (fiber.getFiberRef(currentAttempt) === rootCell) out = Effect.zipRight(out, FiberRef.set(currentAttempt, new AttemptCell(undefined)))
  const services = fiber.currentDefaultServices
  const random = Context.get(services, Random.Random)
  if (!(random instanceof AttemptRandom)) {
    out = Effect.zipRight(out, FiberRef.set(DefaultServices.currentServices, Context.add(services, Random.Random, new AttemptRandom(random))))
  }
  return out
})

/**
 * Runs an Effect task's body as the attempt `generator`: its Scope and Random (see the module
 * docs), its scope closed with the body's exit whatever it is. Inside a run's pipeline fibers
 * ({@link withAttemptServices}) this changes no context; elsewhere it installs the services
 * first.
 *
 * @internal
 */
export const attemptScoped = <A, E, R>(
  body: Effect.Effect<A, E, R>,
  generator: AttemptGenerator
): Effect.Effect<A, E, Exclude<R, Scope.Scope>> =>
  Effect.withFiberRuntime<A, E, Exclude<R, Scope.Scope>>((fiber) => {
    const cell = installedCell(fiber)
    if (cell === undefined) {
      return withAttemptServices(attemptScoped(body, generator)) as Effect.Effect<A, E, Exclude<R, Scope.Scope>>
    }
    let previous: AttemptGenerator | undefined = undefined
    let entered = false
    return Effect.onExit(
      Effect.suspend(() => {
        previous = cell.current
        cell.current = generator
        entered = true
        return body as Effect.Effect<A, E, Exclude<R, Scope.Scope>>
      }),
      (exit) => {
        if (entered) cell.current = previous
        return generator.close(exit)
      }
    )
  })

const noScope = (): undefined => undefined

/** The fiber's cell when the run's attempt services are installed on it, else `undefined`. */
const installedCell = (fiber: Fiber.RuntimeFiber<unknown, unknown>): AttemptCell | undefined => {
  const cell = fiber.getFiberRef(currentAttempt)
  return cell !== rootCell &&
      Context.getOrElse(fiber.currentContext as Context.Context<Scope.Scope>, Scope.Scope, noScope) instanceof
        AttemptScope &&
      Context.get(fiber.currentDefaultServices, Random.Random) instanceof AttemptRandom
    ? cell
    : undefined
}

/**
 * One attempt of an Effect task, to its end: `body()` (called inside the attempt, a throw a
 * defect) runs as the attempt `generator` (as {@link attemptScoped}), its scope is closed with
 * its exit whatever it is (success, failure, interruption), and `end` gets that exit (with a
 * failing finalizer's cause after the body's, as `Effect.onExit` gives it). Never fails; on
 * interruption `end` still runs (uninterruptibly), then the interruption goes on.
 *
 * The same as `Effect.exit(attemptScoped(Effect.suspend(body), generator))` followed by
 * `end`, in one uninterruptible region with one handler: about half the fiber steps, and no
 * Effect at all to close an attempt whose only finalizer is synchronous (a lease's release,
 * see `holdNow.ts`).
 *
 * @internal
 */
export const attemptExit = <A, E, R, B>(
  generator: AttemptGenerator,
  body: () => Effect.Effect<A, E, R>,
  end: (exit: Exit.Exit<A, E>) => B | Effect.Effect<B>
): Effect.Effect<B, never, Exclude<R, Scope.Scope>> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.withFiberRuntime<B, never, Exclude<R, Scope.Scope>>((fiber) => {
      const ended = (exit: Exit.Exit<A, E>): Effect.Effect<B> => {
        const out = end(exit)
        return Effect.isEffect(out) ? out as Effect.Effect<B> : Effect.succeed(out as B)
      }
      const cell = installedCell(fiber)
      if (cell === undefined) {
        return Effect.flatMap(
          Effect.exit(restore(attemptScoped(Effect.suspend(body), generator))),
          ended
        ) as Effect.Effect<B, never, Exclude<R, Scope.Scope>>
      }
      const previous = cell.current
      cell.current = generator
      let self: Effect.Effect<A, E, R>
      try {
        self = body()
      } catch (defect) {
        self = Effect.die(defect)
      }
      const after = (exit: Exit.Exit<A, E>): Effect.Effect<B> => {
        cell.current = previous
        const closing = generator.closeNow(exit)
        if (closing === undefined) return ended(exit)
        return Effect.flatMap(Effect.exit(closing), (closed) => ended(afterClose(exit, closed)))
      }
      return Effect.matchCauseEffect(restore(self as Effect.Effect<A, E, Exclude<R, Scope.Scope>>), {
        onFailure: (cause) => after(Exit.failCause(cause)),
        onSuccess: (a) => after(Exit.succeed(a))
      })
    })
  )

/**
 * An attempt's exit once its scope closed: `exit` when the close succeeded; otherwise the
 * close's failure, after the body's own failure if it failed too (as `Effect.onExit` gives it).
 *
 * @param exit the body's exit
 * @param closed the scope close's exit
 * @internal
 */
export const afterClose = <A, E>(exit: Exit.Exit<A, E>, closed: Exit.Exit<void>): Exit.Exit<A, E> =>
  Exit.isSuccess(closed)
    ? exit
    : Exit.isSuccess(exit)
    ? closed as Exit.Exit<never>
    : Exit.failCause(Cause.sequential(exit.cause, closed.cause))
