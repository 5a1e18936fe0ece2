/**
 * Issue 20 §7 and case C12 (../shared/cases/README.md): secrets, the whole kind.
 *
 * Distinct secrets are planted in every place a user puts one: an `apiKey` option, a variable
 * named by `apiKeyEnv`, a `Cookie` and an `X-Custom-Auth` header, an `api-key` in the base
 * URL's query, a user and password in its userinfo. A loopback server plays a provider that
 * echoes everything it received (Authorization, Cookie, custom header, the full URL) in error
 * bodies of every shape (JSON 401, HTML 500, URL-encoded 400, an error inside a 200, a
 * non-JSON 200, a 429 with a body hint, a base64 echo), behind a growing padding so that every
 * secret straddles each truncation point (120, 300, 600 characters) in some row. Then every
 * byte assay wrote or served is searched: the store files (db, wal, shm), exports of every row
 * kind in every format, `report` text and JSON, `validate` text and JSON, `watch`, every route
 * of `assay serve`, and the stdout and stderr of every command. No secret may appear, nor any
 * 6-character fragment of one; the variable's *name* (`MY_KEY`) and the public query value
 * (`api-version=2024-02-01`) are shown. C12's first half is checked too: with a query string in
 * the base URL, requests go to `…/d1/chat/completions?api-version=…`.
 *
 * Before the fix: Cookie and X-Custom-Auth were stored in clear in `resources.spec`, the URL's
 * query and userinfo too, a secret cut by the 300- or 120-character slices survived as a
 * 13–14-character piece, and URL-encoded / HTML-escaped / base64 echoes were not masked.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import * as path from "node:path"
import { assay, completion, loopbackServer, query, spawnUntilFirstLine, tmp, write } from "./support.js"

const SECRETS = {
  inlineKey: "sk-inl-Qz7XkP9wLr2T",
  envKey: "sk-env-Vb4NmJ8sHq6D",
  cookie: "ck-Ytr5GhW2eLp9Ux",
  custom: "xa-Fd3KsM7qZc1Rn",
  query: "sk-q-Wn6BvT4yHj8E",
  user: "usr-Mk2PqL9xSd",
  password: "pw-Gt8RzN3vKy5A"
} as const

const fragments = (s: string): ReadonlyArray<string> => Array.from({ length: s.length - 5 }, (_, i) => s.slice(i, i + 6))

/** Every place a secret or a 6-character piece of one occurs in `text`. */
const leaksIn = (label: string, text: string): Array<string> => {
  const out: Array<string> = []
  for (const [name, secret] of Object.entries(SECRETS)) {
    for (const f of fragments(secret)) {
      const at = text.indexOf(f)
      if (at >= 0) out.push(`${label}: ${name} fragment "${f}" at ${at}: …${text.slice(Math.max(0, at - 40), at + 40)}…`)
    }
  }
  return out
}

const html = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

describe("secrets, the whole kind (and C12)", () => {
  it.live("planted in every place, echoed in every shape, cut at every position: in no byte written or served", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const urls: Array<string> = []
      const seenAuth = new Set<string>()
      const server = await loopbackServer((req: http.IncomingMessage, res: http.ServerResponse) => {
        let body = ""
        req.on("data", (d: Buffer) => (body += d.toString()))
        req.on("end", () => {
          urls.push(req.url ?? "")
          const auth = req.headers["authorization"] ?? ""
          seenAuth.add(auth)
          const row = Number(/item (\d+)/.exec(body)?.[1] ?? "0")
          const echo = `auth=${auth} cookie=${req.headers["cookie"] ?? ""} custom=${req.headers["x-custom-auth"] ?? ""} url=http://${req.headers.host}${req.url}`
          const pad = "p".repeat((row * 7) % 620)
          const basic = auth.startsWith("Basic ") ? Buffer.from(auth.slice(6), "base64").toString("utf8") : ""
          const json = (status: number, o: unknown, headers: Record<string, string> = {}) =>
            res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(o))
          switch (row % 8) {
            case 0:
              return json(401, { error: { message: `Incorrect API key provided: ${pad}${echo} ${basic}`, type: "invalid_request_error" } })
            case 1:
              return res.writeHead(500, { "content-type": "text/html" }).end(`<html><body>${pad}<pre>${html(echo)}</pre></body></html>`)
            case 2:
              return res.writeHead(400, { "content-type": "text/plain" }).end(`${pad}bad request: ${encodeURIComponent(echo)}`)
            case 3:
              return json(200, { error: { message: `${pad}upstream said: ${echo}`, code: 502 } })
            case 4:
              return res.writeHead(200, { "content-type": "text/plain" }).end(`${pad}not json ${echo}`)
            case 5:
              return json(429, { error: { message: `${pad}${echo}. Please try again in 1ms.` } })
            case 6:
              return json(503, { error: { message: `${pad}b64 ${Buffer.from(`x${echo}`).toString("base64")}`, detail: JSON.stringify(echo) } })
            default:
              return res.writeHead(200, { "content-type": "application/json" }).end(completion("ham"))
          }
        })
      })
      let serve: Awaited<ReturnType<typeof spawnUntilFirstLine>> | undefined
      try {
        const store = path.join(dir, "secrets.db")
        const base = `${server.url}/openai/deployments/d1`
        const file = write(dir, "secrets.json", JSON.stringify({
          run: { store, concurrency: 8 },
          pools: {
            llm: {
              algorithm: "leastBusy",
              degradeAfter: 2,
              deadAfter: 100000,
              cooldown: "50 millis",
              resources: [
                { id: "inline", capacity: 2, options: { baseUrl: `${base}?api-version=2024-02-01`, model: "m", apiKey: SECRETS.inlineKey } },
                {
                  id: "env",
                  capacity: 2,
                  options: {
                    baseUrl: `${base}?api-version=2024-02-01&api-key=${SECRETS.query}`,
                    model: "m",
                    apiKeyEnv: "MY_KEY",
                    headers: { Cookie: `session=${SECRETS.cookie}`, "X-Custom-Auth": SECRETS.custom, "Content-Type": "application/json" }
                  }
                },
                {
                  id: "userinfo",
                  capacity: 2,
                  options: { baseUrl: `http://${SECRETS.user}:${SECRETS.password}@127.0.0.1:${server.port}/openai/deployments/d1/`, model: "m" }
                }
              ]
            }
          },
          pipeline: {
            name: "secrets",
            tasks: [{ use: "chat", options: { template: "item {{.}}", requestTimeout: "10 seconds" }, retry: { maxAttempts: 2, base: "1 millis" } }]
          },
          source: { range: { n: 96 } }
        }, null, 2))
        const env = { MY_KEY: SECRETS.envKey }
        const texts: Array<readonly [string, string]> = []
        const run = await assay(["run", "-c", file], env)
        texts.push(["run stdout", run.stdout], ["run stderr", run.stderr])
        assert.strictEqual(run.code, 1, run.stderr)

        // C12: the query string stays after the path, whatever the base ends with
        assert.include(urls, "/openai/deployments/d1/chat/completions?api-version=2024-02-01")
        assert.include(urls, `/openai/deployments/d1/chat/completions?api-version=2024-02-01&api-key=${SECRETS.query}`)
        assert.include(urls, "/openai/deployments/d1/chat/completions")
        assert.include(seenAuth, `Basic ${Buffer.from(`${SECRETS.user}:${SECRETS.password}`).toString("base64")}`)
        assert.include(seenAuth, `Bearer ${SECRETS.envKey}`)

        for (const args of [["validate", "-c", file], ["validate", "-c", file, "--json"], ["report", store], ["report", store, "--json"], ["report", store, "--errors", "500"], ["watch", store]]) {
          const r = await assay(args, env)
          assert.include([0, 1], r.code, `${args.join(" ")}: ${r.stderr}`)
          texts.push([`${args.join(" ")} stdout`, r.stdout], [`${args.join(" ")} stderr`, r.stderr])
        }
        const validateJson = texts.find(([l]) => l === "validate -c " + file + " --json stdout")![1]
        assert.include(validateJson, "MY_KEY", "a variable's name is shown")
        assert.include(validateJson, "api-version=2024-02-01")

        const kinds = ["pipelines", "tasks", "attempts", "events", "artifacts", "results"] as const
        const formats = ["jsonl", "json", "csv"] as const
        const jobs = kinds.flatMap((k) => formats.map((f) => [k, f] as const))
        for (let i = 0; i < jobs.length; i += 3) {
          await Promise.all(jobs.slice(i, i + 3).map(async ([k, f]) => {
            const out = path.join(dir, `export-${k}.${f}`)
            const r = await assay(["export", "--rows", k, store, out])
            assert.strictEqual(r.code, 0, `${k}.${f}: ${r.stderr}`)
            texts.push([`export ${k}.${f}`, fs.readFileSync(out, "utf8")], [`export ${k}.${f} output`, r.stdout + r.stderr])
          }))
        }

        serve = await spawnUntilFirstLine(["serve", store, "--port", "0"])
        const at = /(http:\/\/127\.0\.0\.1:\d+)/.exec(serve.first)![1]!
        for (const route of [
          "/", "/?run_id=latest", "/stats", "/metrics", "/events", "/pipelines", "/pipelines?state=failed", "/resources", "/errors", "/errors?limit=500",
          "/export?rows=pipelines&format=jsonl", "/export?rows=attempts&format=csv", "/export?rows=events&format=jsonl", "/export?rows=results&format=json"
        ]) {
          const res = await fetch(`${at}${route}`)
          texts.push([`serve ${route}`, await res.text()])
        }
        await serve.stop()
        texts.push(["serve output", serve.output().stdout + serve.output().stderr])

        // the store files, every byte (read as latin1: a secret is ASCII)
        for (const f of fs.readdirSync(dir).filter((f) => f.startsWith("secrets.db"))) {
          texts.push([`store file ${f}`, fs.readFileSync(path.join(dir, f)).toString("latin1")])
        }
        assert.isTrue(texts.some(([l]) => l === "store file secrets.db"))

        const spec = query<{ resource_id: string; spec: string }>(store, "SELECT resource_id, spec FROM resources ORDER BY resource_id")
        const envSpec = JSON.parse(spec.find((s) => s.resource_id === "env")!.spec) as { options: Record<string, unknown> }
        assert.strictEqual(envSpec.options["apiKeyEnv"], "MY_KEY")
        assert.deepStrictEqual(envSpec.options["headers"], { Cookie: "***", "X-Custom-Auth": "***", "Content-Type": "application/json" })
        assert.strictEqual(envSpec.options["baseUrl"], `${base}?api-version=2024-02-01&api-key=***`)

        // the echoes did reach the store, masked
        const errors = query<{ error_message: string }>(store, "SELECT error_message FROM attempts WHERE error_message IS NOT NULL")
        assert.isAbove(errors.length, 40)
        assert.isTrue(errors.some((e) => e.error_message.includes("auth=Bearer ***")), "echoed and masked")

        const leaks = texts.flatMap(([label, text]) => leaksIn(label, text))
        assert.deepStrictEqual(leaks.slice(0, 20), [], `${leaks.length} leaks`)
      } finally {
        await serve?.stop()
        await server.close()
      }
    }), 240_000)
})
