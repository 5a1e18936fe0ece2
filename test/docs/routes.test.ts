/**
 * Every dashboard route the docs name exists on the server (`assay serve`): a reader who
 * copies `/stats` or `/pipelines` from a doc gets an answer, not a 404. The routes are read from
 * the router's source (src/services/internal/statsServer.ts); the docs' candidates are the
 * backticked absolute paths, less file-system paths and the mock LLM server's own routes.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"

const root = path.resolve(__dirname, "../..")
const server = fs.readFileSync(path.join(root, "src/services/internal/statsServer.ts"), "utf8")
const routes = new Set(Array.from(server.matchAll(/HttpRouter\.get\(\s*"([^"]+)"/g), (m) => m[1]!))

/** Paths in the docs that are not the dashboard's: files, and the mock LLM server's routes. */
const notDashboard = /^\/(dev|proc|tmp|etc|home|usr|var|work|path|chat|v1|e|models)(\/|$)/

describe("docs name only routes the dashboard serves", () => {
  it("the router has the routes the docs rely on", () => {
    for (const r of ["/", "/stats", "/pipelines", "/resources", "/errors", "/events"]) assert.isTrue(routes.has(r), r)
  })
  it("every backticked route in docs/*.md exists", () => {
    const missing: Array<string> = []
    for (const file of fs.readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md"))) {
      const text = fs.readFileSync(path.join(root, "docs", file), "utf8")
      for (const m of text.matchAll(/`(\/[a-z][a-z0-9_/-]*)(?:\?[^`]*)?`/g)) {
        const route = m[1]!
        if (notDashboard.test(route) || routes.has(route) || route === "/assets") continue
        missing.push(`${file}: ${route}`)
      }
    }
    assert.deepStrictEqual(missing, [])
  })
})
