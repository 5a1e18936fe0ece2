import { describe, expect, it } from "vitest"
import { usePostgres } from "./postgres.js"

// The harness every Postgres test (store, pools, cluster chaos) stands on.
describe("test PostgreSQL server", () => {
  const pg = usePostgres()

  it("serves fresh databases on loopback and survives a crash restart", async () => {
    await pg.createDatabase("h1")
    pg.psql("h1", "CREATE TABLE t (k int PRIMARY KEY); INSERT INTO t VALUES (1), (2)")
    expect(pg.psql("h1", "SELECT count(*) FROM t").trim()).toBe("2")
    expect(pg.url("h1")).toBe(`postgres://assay@127.0.0.1:${pg.port}/h1`)
    const before = pg.pid()
    await pg.restart("immediate")
    expect(pg.pid()).not.toBe(before)
    expect(pg.psql("h1", "SELECT string_agg(k::text, ',' ORDER BY k) FROM t").trim()).toBe("1,2")
    await expect(pg.createDatabase("h1")).rejects.toThrow(/already exists/)
  })
})
