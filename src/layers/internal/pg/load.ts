/**
 * Loads `PgStore` on demand: `@effect/sql-pg` is an optional peer dependency of assay, so
 * nothing that every program imports (the package entry, the store resolver, the CLI's other
 * commands) may import it statically. A program that names a `postgres://` store loads it here;
 * one that lacks the package gets a `ConfigError` saying which exact version to install.
 *
 * @since 0.8.0
 */
import { Effect } from "effect"
import { ConfigError } from "../../../domain/Errors.js"

/**
 * The `PgStore` module, imported once on first use. Fails with `ConfigError` (CLI exit 2)
 * naming `@effect/sql-pg@0.53.0` when the optional package is not installed.
 *
 * @since 0.8.0
 * @category loading
 */
export const loadPgStore: Effect.Effect<typeof import("../../PgStore.js"), ConfigError> = Effect.tryPromise({
  try: () => import("../../PgStore.js"),
  catch: (cause) => missing(cause)
})

/**
 * The `PgCallCache` module, imported once on first use; fails as {@link loadPgStore}.
 *
 * @since 0.8.0
 * @category loading
 */
export const loadPgCallCache: Effect.Effect<typeof import("../../PgCallCache.js"), ConfigError> = Effect.tryPromise({
  try: () => import("../../PgCallCache.js"),
  catch: (cause) => missing(cause)
})

const missing = (cause: unknown) =>
  new ConfigError({
    message: `postgres:// stores need the optional package @effect/sql-pg 0.53.0 (install it with \`npm i -E @effect/sql-pg@0.53.0\`): ${
      cause instanceof Error ? cause.message : String(cause)
    }`,
    issues: [{ path: "store", message: "@effect/sql-pg is not installed", suggestion: "npm i -E @effect/sql-pg@0.53.0" }]
  })


/**
 * The suites reader of a Postgres store (`assay report URL`), imported once on first use; fails
 * as {@link loadPgStore}.
 *
 * @since 0.12.0
 * @category loading
 */
export const loadPgSuiteReport: Effect.Effect<typeof import("./suiteReport.js"), ConfigError> = Effect.tryPromise({
  try: () => import("./suiteReport.js"),
  catch: (cause) => missing(cause)
})
