/**
 * The test-file side of the throwaway PostgreSQL server (`pgServer.ts`, re-exported here):
 * {@link usePostgres} starts one server per test file.
 */
import { afterAll, beforeAll } from "vitest"
import { type PgServer, startPostgres } from "./pgServer.js"

export * from "./pgServer.js"

/**
 * One server for the calling test file: started in `beforeAll` (fails, never skips, when
 * PostgreSQL is not installed), stopped in `afterAll`. The returned object stands for that
 * server (its members forward to it; use them inside tests and hooks).
 */
export const usePostgres = (): PgServer => {
  let server: PgServer | undefined
  beforeAll(async () => {
    server = await startPostgres()
  }, 120_000)
  afterAll(async () => {
    await server?.stop()
  }, 60_000)
  const it = (): PgServer => {
    if (server === undefined) throw new Error("usePostgres: the server starts in beforeAll; use it inside a test")
    return server
  }
  return {
    get host() {
      return it().host
    },
    get port() {
      return it().port
    },
    get user() {
      return it().user
    },
    get dataDir() {
      return it().dataDir
    },
    url: (database) => it().url(database),
    createDatabase: (database) => it().createDatabase(database),
    psql: (database, sql) => it().psql(database, sql),
    pid: () => it().pid(),
    restart: (mode) => it().restart(mode),
    shutdown: () => it().shutdown(),
    start: () => it().start(),
    stop: () => it().stop()
  }
}
