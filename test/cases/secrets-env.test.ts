/**
 * Issue 18, finding F2: a value that came from `${VAR}` interpolation is a secret whatever its
 * key. A fresh user's trial put `myNote: "${INTERP_KEY}"` beside `apiKey: "${INTERP_KEY}"` on
 * a resource: `apiKey` was masked, `myNote` was stored verbatim in the store's resources row and
 * served by `/stats`, `/resources` and the dashboard's pool table.
 *
 * Here the variable's value goes under an odd key, inside a header assay shows
 * (`X-Title`), inside a list and into the base URL's host part; then every byte assay wrote or
 * served is searched: the store files, `report` (text and JSON), `validate --json`, every row
 * kind of `export`, and `/stats`, `/resources` and the dashboard of `serve`. The value is in
 * none of them; the config text (`${INTERP_KEY}`) is shown in its place. The variable still
 * does its job: the requests reach the server with it.
 *
 * Before the fix: the value was in the store file, `/stats`, `/resources`, the dashboard, the
 * `resources` export and `validate --json`. The same value in a task's options (`system`,
 * `config`) was in `validate --json` (the task's `parameters`) until fix18s.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import * as path from "node:path"
import { assay, completion, loopbackServer, query, spawnUntilFirstLine, tmp, write } from "./support.js"

const VALUE = "sk-INTERP-Wq8Lz3Xv6Rt1"
const PATH_PART = "dep-Hn5Ks2Pj7Yc4"

describe("a value from ${VAR} is never stored or shown, whatever its key (issue 18 F2)", () => {
  it.live("under myNote, a shown header, a list and a URL path: in no byte written or served; the config text is shown instead", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const seen: Array<string> = []
      const bodies: Array<string> = []
      const server = await loopbackServer((req: http.IncomingMessage, res: http.ServerResponse) => {
        let body = ""
        req.on("data", (d: Buffer) => (body += d.toString()))
        req.on("end", () => {
          bodies.push(body)
          seen.push(`${req.url ?? ""} ${req.headers["x-title"] ?? ""}`)
          res.writeHead(200, { "content-type": "application/json" }).end(completion("ham"))
        })
      })
      let serve: Awaited<ReturnType<typeof spawnUntilFirstLine>> | undefined
      try {
        const store = path.join(dir, "env.db")
        const file = write(dir, "env.yaml", [
          "run:",
          `  store: ${store}`,
          "  concurrency: 2",
          "pools:",
          "  llm:",
          "    resources:",
          "      - id: interp",
          "        capacity: 2",
          "        options:",
          `          baseUrl: "${server.url}/\${DEPLOYMENT}/v1"`,
          "          model: m",
          "          apiKey: \"${INTERP_KEY}\"",
          "          myNote: \"${INTERP_KEY}\"",
          "          headers: { X-Title: \"run by ${INTERP_KEY}\" }",
          "          list: [\"${INTERP_KEY}\", plain]",
          "pipeline:",
          "  name: envsecret",
          "  tasks:",
          "    - { use: chat, options: { template: \"item {{.}}\", system: \"${INTERP_KEY}\", config: { note: \"${INTERP_KEY}\" } } }",
          "source:",
          "  range: { n: 4 }",
          ""
        ].join("\n"))
        const env = { INTERP_KEY: VALUE, DEPLOYMENT: PATH_PART }
        const texts: Array<readonly [string, string]> = []
        const run = await assay(["run", "-c", file], env)
        texts.push(["run stdout", run.stdout], ["run stderr", run.stderr])
        assert.strictEqual(run.code, 0, run.stderr)
        // the variables did their job: the requests went where they said, with what they said
        assert.strictEqual(seen.length, 4)
        assert.include(seen[0]!, `/${PATH_PART}/v1/chat/completions run by ${VALUE}`)

        for (const args of [["validate", "-c", file, "--json"], ["report", store], ["report", store, "--json"]]) {
          const r = await assay(args, env)
          assert.strictEqual(r.code, 0, `${args.join(" ")}: ${r.stderr}`)
          texts.push([`${args.join(" ")} stdout`, r.stdout], [`${args.join(" ")} stderr`, r.stderr])
        }
        for (const kind of ["pipelines", "tasks", "attempts", "events", "results", "resources", "pools"]) {
          const out = path.join(dir, `export-${kind}.jsonl`)
          const r = await assay(["export", "--rows", kind, store, out])
          assert.strictEqual(r.code, 0, `${kind}: ${r.stderr}`)
          texts.push([`export ${kind}`, fs.readFileSync(out, "utf8")])
        }
        serve = await spawnUntilFirstLine(["serve", store, "--port", "0"])
        const at = /(http:\/\/127\.0\.0\.1:\d+)/.exec(serve.first)![1]!
        for (const route of ["/", "/stats", "/resources", "/export?rows=resources&format=jsonl"]) {
          const res = await fetch(`${at}${route}`)
          texts.push([`serve ${route}`, await res.text()])
        }
        await serve.stop()
        for (const f of fs.readdirSync(dir).filter((f) => f.startsWith("env.db"))) {
          texts.push([`store file ${f}`, fs.readFileSync(path.join(dir, f)).toString("latin1")])
        }

        const leaks = texts.flatMap(([label, text]) =>
          [VALUE, PATH_PART].flatMap((v) => (text.includes(v) ? [`${label}: …${text.slice(Math.max(0, text.indexOf(v) - 60), text.indexOf(v) + 30)}…`] : []))
        )
        assert.deepStrictEqual(leaks, [])

        // what is shown instead: the config text (a secret-named key stays ***)
        const spec = JSON.parse(query<{ spec: string }>(store, "SELECT spec FROM resources")[0]!.spec) as { options: Record<string, unknown> }
        assert.deepStrictEqual(spec.options, {
          baseUrl: `${server.url}/\${DEPLOYMENT}/v1`,
          model: "m",
          apiKey: "***",
          myNote: "${INTERP_KEY}",
          headers: { "X-Title": "run by ${INTERP_KEY}" },
          list: ["${INTERP_KEY}", "plain"]
        })
        assert.include(texts.find(([l]) => l === "serve /resources")![1], "${INTERP_KEY}")
        // a task option from ${VAR} too (fix18s): its config text in the task's parameters and config
        const described = JSON.parse(texts.find(([l]) => l === "validate -c " + file + " --json stdout")![1]) as {
          pipeline: { tasks: Array<{ parameters: Record<string, unknown>; config: Record<string, unknown> }> }
        }
        assert.strictEqual(described.pipeline.tasks[0]!.parameters["system"], "${INTERP_KEY}")
        assert.deepStrictEqual(described.pipeline.tasks[0]!.config, { note: "${INTERP_KEY}" })
        // and the task ran with the value: the system message the server received
        assert.isTrue(bodies.every((b) => b.includes(VALUE)))
      } finally {
        await serve?.stop()
        await server.close()
      }
    }), 180_000)

  it.live("apiKeyEnv written as ${VAR} (the key itself once expanded): validate and run exit 2 naming the field, the key in no output and no store is created", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const store = path.join(dir, "leak.db")
      const file = write(dir, "leak.yaml", [
        "run:",
        `  store: ${store}`,
        "pools:",
        "  llm:",
        "    resources:",
        "      - id: r",
        "        capacity: 1",
        "        options: { baseUrl: \"http://127.0.0.1:9/v1\", model: m, apiKeyEnv: \"${INTERP_KEY}\" }",
        "pipeline:",
        "  name: leak",
        "  tasks:",
        "    - { use: chat, options: { template: \"item {{.}}\" } }",
        "source:",
        "  range: { n: 2 }",
        ""
      ].join("\n"))
      for (const args of [["validate", "-c", file], ["validate", "-c", file, "--strict-env"], ["run", "-c", file]]) {
        const r = await assay(args, { INTERP_KEY: VALUE })
        assert.strictEqual(r.code, 2, `${args.join(" ")}: ${r.stderr}`)
        assert.include(r.stderr, "pools.llm.resources[0].options.apiKeyEnv")
        assert.notInclude(r.stdout + r.stderr, VALUE, args.join(" "))
      }
      assert.isFalse(fs.existsSync(store))
    }), 120_000)

  it.live("a value from ${VAR} refused in any field (a task's temperature, run.concurrency): the problem shows ${VAR}, never the value", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const file = write(dir, "bad.yaml", [
        "run:",
        `  store: ${path.join(dir, "bad.db")}`,
        "  concurrency: \"${INTERP_KEY}\"",
        "pools:",
        "  llm:",
        "    resources:",
        "      - { id: r, capacity: 1, options: { baseUrl: \"http://127.0.0.1:9/v1\", model: m } }",
        "pipeline:",
        "  name: bad",
        "  tasks:",
        "    - { use: chat, options: { template: \"item {{.}}\", temperature: \"${INTERP_KEY}\" } }",
        "source:",
        "  range: { n: 2 }",
        ""
      ].join("\n"))
      const r = await assay(["validate", "-c", file], { INTERP_KEY: VALUE })
      assert.strictEqual(r.code, 2, r.stderr)
      assert.include(r.stderr, "run.concurrency")
      assert.notInclude(r.stdout + r.stderr, VALUE)
    }), 120_000)
})
