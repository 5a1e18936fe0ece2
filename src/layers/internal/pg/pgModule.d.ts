/**
 * The little of node-postgres (`pg`, the driver under `@effect/sql-pg`, which ships no types
 * of its own) that `prepared.ts` uses: a `Pool` built with a `Client` class of ours.
 */
declare module "pg" {
  /** One connection. */
  export class Client {
    constructor(config?: unknown)
    /** `(text, values, callback)`, `({ name, text, values }, callback)`, or a submittable. */
    query(config: unknown, values?: unknown, callback?: unknown): any
  }
  /** A pool of {@link Client}s (`Client`: the class it makes them with). */
  export class Pool {
    constructor(config?: {
      readonly connectionString?: string | undefined
      readonly connectionTimeoutMillis?: number | undefined
      /** How long an idle connection stays open, ms (pg's default 10,000; 0: never closed). */
      readonly idleTimeoutMillis?: number | undefined
      readonly max?: number | undefined
      readonly application_name?: string | undefined
      readonly Client?: typeof Client | undefined
    })
    readonly options: Record<string, any>
    /** The connections the pool holds, idle or in use. */
    readonly totalCount: number
    on(event: "error", listener: (error: Error) => void): this
    query(text: string): Promise<unknown>
    end(): Promise<void>
  }
  /** Custom type parsers (unused here). */
  export type CustomTypesConfig = unknown
}
