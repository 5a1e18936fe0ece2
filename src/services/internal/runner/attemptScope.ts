/**
 * What an Effect task's attempt runs in: its own `Scope` and Effect's `Random` seeded with the
 * attempt's seed, provided with one context change per attempt (issue 19 §5).
 *
 * `Effect.withRandom` changes the fiber's default services, a second context change per
 * attempt on top of the Scope's, and the seeded generator (a SHA-256 digest and a PCG) was built
 * for every attempt whether the task drew a number or not. Here the run's fibers carry one
 * {@link AttemptRandom} (installed once, {@link withAttemptRandom}): a `Random` that draws from
 * the generator of the attempt found in the fiber's context ({@link CurrentAttempt}, added
 * beside the Scope), built from the attempt's seed the first time the attempt draws, and from
 * the Random it replaced outside attempts. A fiber forked inside an attempt inherits that
 * context, so it draws from its attempt's generator as before, even after a later attempt began.
 *
 * @internal
 */
import { Context, Effect, Random, Scope } from "effect"
import type * as Chunk from "effect/Chunk"

/**
 * The generator of one attempt, built on first use from its seed (`seed` is called once).
 *
 * @internal
 */
export class AttemptGenerator {
  #random: Random.Random | undefined = undefined
  readonly #seed: () => number
  constructor(seed: () => number) {
    this.#seed = seed
  }
  get random(): Random.Random {
    return this.#random ??= Random.make(this.#seed())
  }
}

/**
 * The running attempt's generator, in an Effect task attempt's context.
 *
 * @internal
 */
export class CurrentAttempt extends Context.Tag("assay/internal/CurrentAttempt")<CurrentAttempt, AttemptGenerator>() {}

/**
 * A `Random` that draws from the generator of the attempt in the calling fiber's context, or
 * from `outside` when the fiber runs no attempt.
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
    return Effect.contextWithEffect((context: Context.Context<never>) => {
      const attempt = Context.getOption(context as Context.Context<CurrentAttempt>, CurrentAttempt)
      return f(attempt._tag === "Some" ? attempt.value.random : this.#outside)
    })
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
 * Runs `self` with an {@link AttemptRandom} as the default `Random` (over the current one),
 * unless one is there already. The runner wraps the fiber that forks the pipelines' fibers.
 *
 * @internal
 */
export const withAttemptRandom = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.randomWith((random) => random instanceof AttemptRandom ? self : Effect.withRandom(self, new AttemptRandom(random)))

/**
 * Runs an Effect task's body in a new Scope (closed with the body's exit, whatever it is) with
 * `generator` as its attempt's Random: one context change when the fiber already carries an
 * {@link AttemptRandom}, two otherwise.
 *
 * @internal
 */
export const attemptScoped = <A, E, R>(
  body: Effect.Effect<A, E, R>,
  generator: AttemptGenerator
): Effect.Effect<A, E, Exclude<R, Scope.Scope>> =>
  Effect.randomWith((random) => {
    const scoped = Effect.flatMap(Scope.make(), (scope) =>
      Effect.onExit(
        Effect.mapInputContext(
          body,
          (context: Context.Context<Exclude<R, Scope.Scope>>) =>
            Context.add(Context.add(context, Scope.Scope, scope), CurrentAttempt, generator) as unknown as Context.Context<R>
        ),
        (exit) => Scope.close(scope, exit)
      ))
    return random instanceof AttemptRandom ? scoped : Effect.withRandom(scoped, new AttemptRandom(random))
  })
