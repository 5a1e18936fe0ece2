/**
 * The suites of a Postgres store for `assay report URL` (`suites.ts` `summaries` over a
 * connection of its own). Loaded on demand (`load.ts`): it imports `@effect/sql-pg`.
 *
 * @internal
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Effect, Redacted } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"
import * as SqlClient from "@effect/sql/SqlClient"
import { redactUrl } from "./url.js"
import { summaries, type SuiteSummary } from "./suites.js"

/**
 * Every suite the Postgres store at `url` holds (see `suites.ts`), `StoreUnavailable` (the URL
 * without its password) when it cannot be read.
 *
 * @internal
 */
export const readSuites = (url: string): Effect.Effect<ReadonlyArray<SuiteSummary>, StoreUnavailable> =>
  Effect.flatMap(SqlClient.SqlClient, summaries).pipe(
    Effect.scoped,
    Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })),
    Effect.catchAll((e) =>
      Effect.fail(
        e instanceof StoreUnavailable ? e : new StoreUnavailable({ message: redactUrl(`suites of ${url}: ${e instanceof Error ? e.message : String(e)}`) })
      )
    )
  )
