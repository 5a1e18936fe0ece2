/**
 * The contract of a lease as tasks see it: what `ctx.acquire(...)` returns. The pool service
 * (`src/services/Pool.ts`) implements it; tasks and the runner only depend on this shape.
 *
 * @since 0.1.0
 */
import type { Duration, Effect } from "effect"
import type { AcquireTimeout, ConfigError, PluginError, PoolNotFound, ResourceUnavailable, ServerDelayRefused } from "./Errors.js"
import type { RateLimitStatus } from "./RateLimit.js"

/**
 * A read-only view of a resource: one concrete external capability (an endpoint, an API key,
 * a local worker).
 *
 * @since 0.1.0
 * @category models
 */
export interface ResourceInfo {
  /** Stable identifier, recorded on every lease. */
  readonly id: string
  /** A category of your choosing ("llm", "gpu", …); selectors can match it. */
  readonly kind: string
  /** What a client factory reads (base URL, key, model, quota); selectors match dot paths. */
  readonly options: Readonly<Record<string, unknown>>
  /** Extra labels selectors can match. */
  readonly tags: Readonly<Record<string, string>>
  /** Concurrent leases this resource allows. */
  readonly capacity: number
  /** Free-form metadata. */
  readonly meta: Readonly<Record<string, unknown>>
}

/**
 * Chooses which resources of a pool may serve an acquire. Every given field must match:
 * `id` exactly, `kind` exactly, each `tags` entry exactly, each `options` entry by dot path
 * (`"quota.tokens"`) with deep equality, and the `where` predicate.
 *
 * @since 0.1.0
 * @category models
 */
export interface Selector {
  readonly id?: string | undefined
  readonly kind?: string | undefined
  readonly tags?: Readonly<Record<string, string>> | undefined
  readonly options?: Readonly<Record<string, unknown>> | undefined
  readonly where?: ((resource: ResourceInfo) => boolean) | undefined
}

/**
 * An acquisition algorithm given by name (`"wait"`, `"backoff"`, …) or by name plus options
 * (`{ name: "backoff", cap: "60 seconds" }`), or an algorithm value (the pool module's
 * `AcquireAlgorithm` interface).
 *
 * @since 0.1.0
 * @category models
 */
export type AlgorithmInput = string | { readonly name: string; readonly [option: string]: unknown } | {
  readonly _tag: "AcquireAlgorithm"
}

/**
 * Options of one acquire: the pool (default: the task's `resource`), the algorithm (default:
 * the task's, then the pool's), a timeout after which the acquire fails with
 * {@link AcquireTimeout}, and a {@link Selector}.
 *
 * @since 0.1.0
 * @category models
 */
export interface AcquireOptions extends Selector {
  readonly pool?: string | undefined
  readonly algorithm?: AlgorithmInput | undefined
  readonly timeout?: Duration.DurationInput | undefined
}

/**
 * What a task tells the pool about one use of a lease. This is the only source of resource
 * health: `ok: false` counts one consecutive failure, `ok: true` resets the count and revives
 * a degraded or dead resource. `latencyMs` feeds a per-resource moving average, `usage`
 * accumulates quota counters (`{ tokens: 812 }`), `error` is kept for diagnosis.
 * `rateLimit` is what the answer's headers said about the key's limits (remaining requests
 * and tokens, time to reset; see `RateLimit.statusOfHeaders`): it changes no health, and an
 * algorithm that paces by it (`adaptive`) reads it.
 *
 * Token and cost accounting (see `Pricing`) reads `usage.promptTokens` /
 * `usage.completionTokens` (tokens in and out), `model` (the model that answered, what the
 * price table is looked up by, then `requestedModel`), `estimated` (the tokens were estimated because the server
 * reported none) and `costUsd` (a cost the server reported, used only when no configured
 * price covers the model). Inside a run, the runner prices each report before the pool sees
 * it: `costUsd` then holds the priced cost the attempt records (what a study's per-trial
 * `costUsd` budget counts).
 *
 * @since 0.1.0
 * @category models
 */
export interface LeaseReport {
  readonly ok?: boolean | undefined
  readonly latencyMs?: number | undefined
  readonly usage?: Readonly<Record<string, number>> | undefined
  readonly error?: unknown
  readonly rateLimit?: RateLimitStatus | undefined
  /** The model that answered (else the one asked for), for pricing. */
  readonly model?: string | undefined
  /** The model that was asked for, priced when the answering `model` has no price (a dated version's name). */
  readonly requestedModel?: string | undefined
  /** Whether `usage`'s tokens are an estimate (the server reported none). */
  readonly estimated?: boolean | undefined
  /** The cost of this use in US dollars (see above). */
  readonly costUsd?: number | undefined
}

/**
 * The failures an acquire can end with: no resource (`ResourceUnavailable`, also a failed
 * client factory), a timeout (`AcquireTimeout`), every usable resource throttled by its
 * server for longer than the acquire accepts (`ServerDelayRefused`, class `rate_limit`), an
 * unknown pool (`PoolNotFound`), or an algorithm given per call that does not resolve
 * (`ConfigError`, `PluginError`).
 *
 * @since 0.1.0
 * @category models
 */
export type AcquireError =
  | ResourceUnavailable
  | AcquireTimeout
  | ServerDelayRefused
  | PoolNotFound
  | ConfigError
  | PluginError

/**
 * One use of one resource.
 *
 * @since 0.1.0
 * @category models
 */
export interface Lease<Client = unknown> {
  /** Unique lease id, recorded on the attempt. */
  readonly id: string
  /** The pool it came from. */
  readonly pool: string
  /** The resource behind it. */
  readonly resource: ResourceInfo
  /** Shortcut for `resource.options`. */
  readonly options: Readonly<Record<string, unknown>>
  /** The client built once per resource by its factory (`undefined` without a factory). */
  readonly client: Client
  /** The task holding it. */
  readonly taskName: string
  /** How long it has been held, in milliseconds (from `Clock`). */
  readonly heldMs: Effect.Effect<number>
  /** Reports the outcome of one use (see {@link LeaseReport}). */
  readonly report: (report: LeaseReport) => Effect.Effect<void>
  /** Takes the resource out of rotation at once (for its cooldown), e.g. quota exhausted. */
  readonly degrade: (reason?: string) => Effect.Effect<void>
  /** Gives the lease back now; idempotent (a second release does nothing). */
  readonly releaseNow: Effect.Effect<void>
}
