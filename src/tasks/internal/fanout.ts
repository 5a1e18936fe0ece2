/**
 * `fanout`: several tasks run concurrently on the same input inside one task, so one
 * checkpoint. This is how a pipeline expresses a branching step (three judges scoring the
 * same answer) without becoming a graph.
 *
 * Three consequences, all deliberate:
 *
 * - **Retry is group-level.** One failed branch fails the group (with `onError: "raise"`) and
 *   a retry re-runs every branch. The children's own policies do not apply per branch; the
 *   group uses {@link mostPermissiveRetry} of them unless `retry` is given.
 * - **Branches share the parent's context**: their leases and events are recorded under the
 *   fanout task, one complete record per step.
 * - **The runner sees only the group**, so `resource`, `algorithm` and `timeout` are taken
 *   from the children only when every child declares the same value (else left unset).
 *   Each branch still acquires from its own declared pool with its own algorithm by default.
 *
 * The trade-off: a resume after a failure re-sends every branch. When one branch is
 * expensive, make it a task of its own.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Either, Predicate } from "effect"
import { classify, ConfigError, type ConfigIssue, type ErrorClass, errorTypeOf, HandoffRefused } from "../../domain/Errors.js"
import { type Handoff, isHandoff } from "../../domain/Handoff.js"
import * as Evaluator from "../../domain/Evaluator.js"
import { branchCacheOf } from "../../domain/internal/branchCache.js"
import { messageOf } from "../../domain/internal/errors.js"
import { canonicalJsonUnsafe, digest } from "../../domain/Json.js"
import type { AcquireOptions } from "../../domain/Lease.js"
import { RetryPolicy, type RetryPolicyInput } from "../../domain/RetryPolicy.js"
import * as Task from "../../domain/Task.js"
import type { TaskContext } from "../../domain/TaskContext.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * What a group does when a branch fails: `"raise"` (default) fails the group with the first
 * failure and interrupts the other branches; `"collect"` lets every branch finish and records
 * each failure as a {@link BranchFailure} in place of its value.
 *
 * @since 0.1.0
 * @category models
 */
export type OnError = "raise" | "collect"

/**
 * Options of {@link fanout}:
 *
 * - `name`: the group's name (default `"fanout"`);
 * - `onError`: see {@link OnError};
 * - `retry`: the group's policy (default: {@link mostPermissiveRetry} of the children's);
 * - `version`, `config`: as in `Task.make`.
 *
 * @since 0.1.0
 * @category models
 */
export interface FanoutOptions {
  readonly name?: string | undefined
  readonly onError?: OnError | undefined
  readonly retry?: RetryPolicy | RetryPolicyInput | undefined
  readonly version?: string | null | undefined
  readonly config?: Task.JsonObject | undefined
}

/**
 * A failed branch under `onError: "collect"`: the error's type (`_tag` or `name`), its
 * message and its {@link ErrorClass}.
 *
 * @since 0.1.0
 * @category models
 */
export interface BranchFailure {
  readonly error: {
    readonly type: string
    readonly message: string
    readonly class: ErrorClass
  }
}

/**
 * Whether a branch value is a {@link BranchFailure}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isBranchFailure = (u: unknown): u is BranchFailure =>
  Predicate.isObject(u) && Object.keys(u).length === 1 && Predicate.isObject((u as { error?: unknown }).error) &&
  typeof (u as BranchFailure).error.class === "string" && typeof (u as BranchFailure).error.type === "string"

/**
 * A non-empty tuple of tasks.
 *
 * @since 0.1.0
 * @category models
 */
export type Branches = readonly [Task.Any, ...ReadonlyArray<Task.Any>]

/**
 * The input a group accepts: the intersection of its children's inputs (every child must
 * accept it).
 *
 * @since 0.1.0
 * @category type-level
 */
export type InputOf<T extends ReadonlyArray<Task.Any>> = T[number] extends Task.Task<infer I, any, any, any> ? I
  : never

/**
 * The output of a group: the children's values by task name. Task names are plain strings
 * at the type level, so the record is keyed by `string` and its values are the union of the
 * children's outputs (plus {@link BranchFailure} under `"collect"`).
 *
 * @since 0.1.0
 * @category type-level
 */
export type OutputOf<T extends ReadonlyArray<Task.Any>> = { readonly [name: string]: Task.Output<T[number]> }

/**
 * The extra error of a group whose branches may return a `Handoff` directive: such a
 * directive is refused with a fatal {@link HandoffRefused} (a group is one step, so a control
 * transition cannot belong to one of its concurrent branches). `never` when no branch's type
 * includes a directive.
 *
 * @since 0.1.0
 * @category type-level
 */
export type HandoffErrorOf<T extends ReadonlyArray<Task.Any>> = [
  Extract<T[number] extends Task.Task<any, infer O, any, any> ? O : never, Handoff>
] extends [never] ? never
  : HandoffRefused

/**
 * The output of a group with `onError: "collect"`.
 *
 * @since 0.1.0
 * @category type-level
 */
export type CollectedOutputOf<T extends ReadonlyArray<Task.Any>> = {
  readonly [name: string]: Task.Output<T[number]> | BranchFailure
}

// ---------------------------------------------------------------------------------------------
// Group policy
// ---------------------------------------------------------------------------------------------

/**
 * The most permissive of several retry policies, field by field:
 *
 * - `maxAttempts`: the largest;
 * - `on`: the union (first-seen order); `retryClassified` / `retryUnknown`: true if any is
 *   (so any failure some child would retry, the group retries);
 * - `base`, `factor`, `cap`: the largest (the group waits at least as long as any child
 *   would, so it never presses a resource harder than one of its children's policies);
 * - `jitter`: the common value when all agree, else `"full"`;
 * - `maxTotal`: none when any child has none, else the largest.
 *
 * Policies that are all the default give the default (one attempt). An empty list gives
 * {@link RetryPolicy.default}.
 *
 * @since 0.1.0
 * @category policies
 */
export const mostPermissiveRetry = (policies: ReadonlyArray<RetryPolicy>): RetryPolicy => {
  const [first, ...rest] = policies
  if (first === undefined) return RetryPolicy.default
  if (rest.length === 0) return first
  const maxMs = (f: (p: RetryPolicy) => Duration.Duration) => Math.max(...policies.map((p) => Duration.toMillis(f(p))))
  const on: Array<string> = []
  for (const p of policies) for (const o of p.on) if (!on.includes(o)) on.push(o)
  const unboundedTotal = policies.some((p) => p.maxTotal === undefined)
  const input: { -readonly [K in keyof RetryPolicyInput]: RetryPolicyInput[K] } = {
    maxAttempts: Math.max(...policies.map((p) => p.maxAttempts)),
    on,
    retryClassified: policies.some((p) => p.retryClassified),
    retryUnknown: policies.some((p) => p.retryUnknown),
    base: Duration.millis(maxMs((p) => p.base)),
    factor: Math.max(...policies.map((p) => p.factor)),
    cap: Duration.millis(maxMs((p) => p.cap)),
    jitter: policies.every((p) => p.jitter === first.jitter) ? first.jitter : "full"
  }
  if (!unboundedTotal) input.maxTotal = Duration.millis(maxMs((p) => p.maxTotal!))
  return RetryPolicy.make(input)
}

/** The value every child declares, or `undefined` when they disagree. */
const agreed = <A>(children: ReadonlyArray<Task.Any>, get: (t: Task.Any) => A, key: (a: A) => string) => {
  const values = children.map(get)
  const k = key(values[0]!)
  return values.every((v) => key(v) === k) ? { value: values[0]! } : undefined
}

// ---------------------------------------------------------------------------------------------
// Branch context
// ---------------------------------------------------------------------------------------------

/**
 * The seed a branch sees: the first 8 hex digits of the blake2b digest of
 * `"<group seed>/<branch name>"`, as an unsigned 32-bit integer. Branches of one attempt thus
 * draw independently of each other, and the same branch of the same attempt always draws the
 * same way.
 *
 * @since 0.1.0
 * @category branches
 */
export const branchSeed = (seed: number, name: string): number =>
  Number.parseInt(digest(`${seed}/${name}`).slice(0, 8), 16)

const withChildDefaults = (o: AcquireOptions | string | undefined, child: Task.Any): AcquireOptions => {
  const given: AcquireOptions = typeof o === "string" ? { pool: o } : (o ?? {})
  const resource = child.options.resource
  const algorithm = child.options.algorithmInstance ?? child.options.algorithm
  return {
    ...given,
    ...(given.pool === undefined && resource !== null ? { pool: resource } : {}),
    ...(given.algorithm === undefined && algorithm !== null ? { algorithm } : {})
  }
}

/**
 * The context a branch runs with: the parent's (same task name, attempt, leases owner, event
 * stream, meta), except that `seed` is the {@link branchSeed} and `acquire` /
 * `acquireLease` default to the child's own `resource` and `algorithm` (an explicit pool or
 * algorithm in the call still wins).
 *
 * @since 0.1.0
 * @category branches
 */
export const branchContext = (ctx: TaskContext, child: Task.Any): TaskContext => {
  const overrides: Partial<Record<PropertyKey, unknown>> = {
    seed: branchSeed(ctx.seed, child.name),
    acquire: (o?: AcquireOptions | string) => ctx.acquire(withChildDefaults(o, child)),
    acquireLease: (o?: AcquireOptions | string) => ctx.acquireLease(withChildDefaults(o, child))
  }
  // A proxy, not `Object.create(ctx)`: the attempt context's getters read its private state
  // (`#shared`), which only works with the context itself as the receiver.
  return new Proxy(ctx, {
    get: (target, prop) => Object.hasOwn(overrides, prop) ? overrides[prop] : Reflect.get(target, prop, target),
    has: (target, prop) => Object.hasOwn(overrides, prop) || Reflect.has(target, prop)
  })
}

// ---------------------------------------------------------------------------------------------
// fanout
// ---------------------------------------------------------------------------------------------

const optionKeys = new Set(["name", "onError", "retry", "version", "config"])

const describeFailure = (e: unknown): BranchFailure => ({
  error: { type: errorTypeOf(e), message: messageOf(e), class: classify(e) }
})

/**
 * Runs several tasks concurrently on the same input, in one checkpoint, and returns
 * `{ [taskName]: value }` (keys in the children's order).
 *
 * `fanout(a, b, c)` or `fanout(a, b, c, options)` (see {@link FanoutOptions}). The group:
 *
 * - accepts an input every child accepts ({@link InputOf});
 * - runs every branch at once with the parent's context ({@link branchContext});
 * - with `onError: "raise"` fails with the first branch failure (the others are interrupted,
 *   their scoped leases released); with `"collect"` returns a {@link BranchFailure} for each
 *   failed branch and never fails (defects and interruptions still propagate);
 * - refuses a branch that returns a `Handoff` directive, in both modes: the group fails with a
 *   fatal {@link HandoffRefused} naming the group and the branch (never retried, never
 *   collected; a nested group's refusal propagates through a collecting parent too);
 * - retries as a whole, with `retry` or {@link mostPermissiveRetry} of the children;
 * - declares `resource`, `algorithm` and `timeout` only when every child declares the same
 *   (a shared custom algorithm known only through the children's `version` is declared only
 *   when the group has a `version` too; the branches use it either way); a branch's own
 *   `timeout` is not enforced inside the group;
 * - records its children (in order) in `children` and `{ onError }` in `parameters`, so a
 *   change to any child changes the pipeline identity;
 * - under a run's call cache, serves or stores each cacheable branch (a judge, a chat, a task
 *   declared `cache`) under the key it would have as a task at the group's place (since
 *   fix18e; `docs/cache.md`, "Inside a fanout").
 *
 * Throws `ConfigError` when there is no child, an argument is not a task, two children
 * share a name, or an option is unknown or invalid.
 *
 * @since 0.1.0
 * @category constructors
 */
export function fanout<const T extends Branches>(
  ...tasks: T
): Task.Task<InputOf<T>, OutputOf<T>, Task.Error<T[number]> | HandoffErrorOf<T>, Task.Context<T[number]>>
export function fanout<const T extends Branches>(
  ...args: [...T, FanoutOptions & { readonly onError: "collect" }]
): Task.Task<InputOf<T>, CollectedOutputOf<T>, HandoffErrorOf<T>, Task.Context<T[number]>>
export function fanout<const T extends Branches>(
  ...args: [...T, FanoutOptions & { readonly onError?: "raise" | undefined }]
): Task.Task<InputOf<T>, OutputOf<T>, Task.Error<T[number]> | HandoffErrorOf<T>, Task.Context<T[number]>>
export function fanout<const T extends Branches>(
  ...args: [...T, FanoutOptions]
): Task.Task<InputOf<T>, CollectedOutputOf<T>, Task.Error<T[number]> | HandoffErrorOf<T>, Task.Context<T[number]>>
export function fanout(...args: ReadonlyArray<unknown>): Task.Any {
  const issues: Array<ConfigIssue> = []
  const last = args[args.length - 1]
  let options: FanoutOptions = {}
  let taskArgs = args
  if (last !== undefined && !Task.isTask(last)) {
    if (Predicate.isObject(last) && !Array.isArray(last)) {
      options = last as FanoutOptions
      taskArgs = args.slice(0, -1)
    }
  }
  for (const key of Object.keys(options)) {
    if (!optionKeys.has(key)) issues.push({ path: key, message: `unknown fanout option "${key}"` })
  }
  if (options.name !== undefined && (typeof options.name !== "string" || options.name.trim() === "")) {
    issues.push({ path: "name", message: "name must be a non-empty string" })
  }
  const onError = options.onError ?? "raise"
  if (onError !== "raise" && onError !== "collect") {
    issues.push({ path: "onError", message: `onError must be "raise" or "collect", got ${String(onError)}` })
  }
  const children: Array<Task.Any> = []
  taskArgs.forEach((t, i) => {
    if (Task.isTask(t)) children.push(t)
    else issues.push({ path: `tasks[${i}]`, message: "not a task" })
  })
  if (taskArgs.length === 0) issues.push({ path: "tasks", message: "a fanout needs at least one task" })
  const seen = new Map<string, number>()
  children.forEach((c, i) => {
    const previous = seen.get(c.name)
    if (previous !== undefined) {
      issues.push({
        path: `tasks[${i}]`,
        message: `duplicate branch name "${c.name}" (also tasks[${previous}])`,
        suggestion: "give each branch a distinct name, e.g. with Task.withOverrides(task, { name })"
      })
    } else {
      seen.set(c.name, i)
    }
  })
  const name = options.name ?? "fanout"
  if (issues.length > 0) {
    throw new ConfigError({
      message: `fanout "${name}": ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
      issues
    })
  }

  const resource = agreed(children, (c) => c.options.resource, (r) => String(r))
  const algorithm = agreed(
    children,
    (c) => c.options,
    (o) => canonicalJsonUnsafe(o.algorithm)
  )
  const timeout = agreed(
    children,
    (c) => c.options.timeout,
    (t) => (t === null ? "none" : String(Duration.toMillis(t)))
  )
  const groupOptions: Task.BaseOptions = {
    retry: options.retry ?? mostPermissiveRetry(children.map((c) => c.options.retry)),
    ...(resource !== undefined && resource.value !== null ? { resource: resource.value } : {}),
    // A custom algorithm known only by the children's `version` is left to the branches (they
    // acquire with it through branchContext), so the group needs no version of its own.
    ...(algorithm !== undefined && (algorithm.value.algorithm?.["custom"] !== true || options.version != null) ?
      { algorithm: algorithm.value.algorithmInstance ?? algorithm.value.algorithm } :
      {}),
    ...(timeout !== undefined && timeout.value !== null ? { timeout: timeout.value } : {}),
    ...(options.version !== undefined ? { version: options.version } : {}),
    ...(options.config !== undefined ? { config: options.config } : {}),
    parameters: { onError },
    children,
    codeDigest: "assay.fanout/v1"
  }
  const names = children.map((c) => c.name)
  const collect = onError === "collect"
  const refuse = (child: Task.Any, directive: Handoff): HandoffRefused =>
    new HandoffRefused({
      message: `fanout "${name}": branch "${child.name}" returned ${
        String(directive)
      }, but a fanout branch cannot hand off (the group is one step, so a control transition cannot belong to one of its concurrent branches): return the directive from a task of its own, after the group`,
      task: name
    })
  return Task.make(name, groupOptions, (input: unknown, ctx) => {
    // the call cache of the run, when it has one and a branch is cacheable (a judge, a chat,
    // a task declared `cache`): each such branch is served or stored under the key it has as
    // a task at the group's place (fix18e)
    const cached = branchCacheOf(ctx)
    const branches = children.map((child) => {
      // an evaluator branch runs blind, as the runner runs an evaluator task (a blind group's
      // branches are blind already: its context and input were blinded by the runner)
      const own = child.options.evaluator
        ? Effect.suspend(() => {
          const blind = Evaluator.blind(branchContext(ctx, child), input)
          return child.run(blind.input, blind.ctx)
        })
        : Effect.suspend(() => child.run(input, branchContext(ctx, child)))
      const run = cached === undefined || child.options.cache === null ? own : cached(child, input, own)
      return collect ?
        Effect.flatMap(Effect.either(run), (e): Effect.Effect<unknown, HandoffRefused> =>
          Either.isRight(e) ?
            (isHandoff(e.right) ? Effect.fail(refuse(child, e.right)) : Effect.succeed(e.right)) :
            // a nested group's refusal is a definition error, never a collected branch failure
            e.left instanceof HandoffRefused ? Effect.fail(e.left) : Effect.succeed(describeFailure(e.left))) :
        Effect.flatMap(run, (v) => (isHandoff(v) ? Effect.fail(refuse(child, v)) : Effect.succeed(v)))
    })
    return Effect.map(
      Effect.all(branches, { concurrency: "unbounded" }),
      (values) => Object.fromEntries(values.map((v, i) => [names[i]!, v]))
    )
  })
}
