/**
 * The tasks of the example study (`study.yaml`): guessing whether a number is a multiple of 3.
 *
 * - `guess(strategy, noise)`: `arithmetic` answers right except with probability `noise`;
 *   `coin` answers at random. The randomness comes from the pipeline's seed (`ctx.seed`), which
 *   assay derives from the pipeline id: the same trial always draws the same numbers, and two
 *   repeats of a variant draw different ones.
 * - `score`: reports the pipeline-scope metric `accuracy` (1 right, 0 wrong); a trial's accuracy
 *   is its mean over the trial's pipelines.
 *
 * @since 0.6.0
 */
import { Effect } from "effect"
import { Task } from "assay"

/**
 * A number between 0 and 1 from a seed and a salt (mulberry32: small, fast, deterministic).
 *
 * @since 0.6.0
 * @category helpers
 */
export const draw = (seed: number, salt: number): number => {
  let t = (seed ^ Math.imul(salt + 1, 0x9e3779b1)) + 0x6d2b79f5
  t = Math.imul(t ^ (t >>> 15), 1 | t)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/**
 * A guess and the truth.
 *
 * @since 0.6.0
 * @category models
 */
export interface Guess {
  readonly n: number
  readonly guess: boolean
  readonly truth: boolean
}

/**
 * The guessing task of a variant (see the module docs).
 *
 * @param strategy `arithmetic` or `coin`
 * @param noise probability (0..1) that `arithmetic` answers wrong
 * @since 0.6.0
 * @category tasks
 */
export const guess = (strategy: string, noise: number) =>
  Task.sync("guess", { parameters: { strategy, noise } }, (n: number, ctx): Guess => {
    const truth = n % 3 === 0
    const flip = draw(ctx.seed, n) < noise
    const answer = strategy === "coin" ? draw(ctx.seed, n + 1000) < 0.5 : flip ? !truth : truth
    return { n, guess: answer, truth }
  })

/**
 * Reports `accuracy` for the pipeline (1 when the guess was right).
 *
 * @since 0.6.0
 * @category tasks
 */
export const score = Task.make("score", (g: Guess, ctx) =>
  Effect.as(Effect.orDie(ctx.reportMetric("accuracy", g.guess === g.truth ? 1 : 0, { display: "percent" })), g.guess === g.truth))
