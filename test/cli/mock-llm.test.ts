import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"

const bin = fileURLToPath(new URL("../../bin/assay", import.meta.url))

interface Running {
  readonly first: Promise<string>
  readonly exit: Promise<{ code: number | null; stderr: string }>
  readonly kill: (signal: NodeJS.Signals) => void
}

/** Spawns `bin/assay ...args`; `first` resolves with the first stdout line. */
const start = (args: ReadonlyArray<string>): Running => {
  const child = spawn(bin, [...args], { stdio: ["ignore", "pipe", "pipe"] })
  let out = ""
  let err = ""
  let resolveFirst: (line: string) => void = () => {}
  const first = new Promise<string>((resolve) => {
    resolveFirst = resolve
  })
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString()
    const nl = out.indexOf("\n")
    if (nl >= 0) resolveFirst(out.slice(0, nl))
  })
  child.stderr.on("data", (d: Buffer) => {
    err += d.toString()
  })
  const exit = new Promise<{ code: number | null; stderr: string }>((resolve) => {
    child.on("close", (code) => {
      resolveFirst("")
      resolve({ code, stderr: err })
    })
  })
  return { first, exit, kill: (s) => child.kill(s) }
}

const tmp = (name: string) => NodePath.join(os.tmpdir(), `assay-mock-cli-${process.pid}-${Date.now()}-${name}`)

describe("assay mock-llm", () => {
  it.live("prints its address, answers, logs to --log, and exits 0 on SIGINT", () =>
    Effect.promise(async () => {
      const log = tmp("log.jsonl")
      const run = start(["mock-llm", "--port", "0", "--seed", "3", "--log", log])
      try {
        const ready = JSON.parse(await run.first)
        assert.strictEqual(ready.event, "listening")
        assert.strictEqual(ready.host, "127.0.0.1")
        assert.isAbove(ready.port, 0)
        assert.strictEqual(ready.seed, 3)
        assert.deepStrictEqual(ready.endpoints.map((e: any) => e.name), ["fast", "steady", "limited"])
        const steady = ready.endpoints.find((e: any) => e.name === "steady")
        const res = await fetch(`${steady.baseUrl}/chat/completions`, {
          method: "POST",
          headers: { authorization: "Bearer cli-key", "content-type": "application/json" },
          body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "Subject: Re: cvs\n\nBob wrote: ok" }] })
        })
        assert.strictEqual(res.status, 200)
        const body = (await res.json()) as any
        assert.isString(body.choices[0].message.content)
        run.kill("SIGINT")
        const done = await run.exit
        assert.strictEqual(done.code, 0, done.stderr)
        const lines = fs.readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l))
        assert.strictEqual(lines.length, 1)
        assert.strictEqual(lines[0].endpoint, "steady")
        assert.strictEqual(lines[0].status, 200)
      } finally {
        run.kill("SIGKILL")
        fs.rmSync(log, { force: true })
      }
    }))

  it.live("exits 0 on SIGTERM too, with flag overrides applied", () =>
    Effect.promise(async () => {
      // one request per 1,000 s: the second call finds the bucket empty however slow the machine
      // (at --rps 1 a call more than 1 s after the first got a fresh token); no storm windows
      const run = start(["mock-llm", "--endpoints", "1", "--rps", "0.001", "--burst", "1", "--latency-ms", "0", "--no-storms"])
      try {
        const ready = JSON.parse(await run.first)
        const url = `${ready.endpoints[0].baseUrl}/chat/completions`
        const call = () =>
          fetch(url, {
            method: "POST",
            headers: { authorization: "Bearer k", "content-type": "application/json" },
            body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }] })
          })
        const statuses = [(await call()).status, (await call()).status]
        assert.deepStrictEqual(statuses, [200, 429])
        run.kill("SIGTERM")
        assert.strictEqual((await run.exit).code, 0)
      } finally {
        run.kill("SIGKILL")
      }
    }))

  it.live("a signal the moment the address is printed still ends it with exit 0 (SIGHUP too: the terminal closed)", () =>
    Effect.promise(async () => {
      const run = start(["mock-llm", "--endpoints", "1"])
      try {
        JSON.parse(await run.first)
        // at once: the signal is claimed before the address is printed
        run.kill("SIGHUP")
        assert.strictEqual((await run.exit).code, 0)
      } finally {
        run.kill("SIGKILL")
      }
    }))

  it.live("a bad profile file exits 2 naming the field path", () =>
    Effect.promise(async () => {
      const profile = tmp("profile.json")
      fs.writeFileSync(profile, JSON.stringify({ endpoints: [{ name: "a", latency: { medianMs: -5 } }] }))
      try {
        const done = await start(["mock-llm", "--profile", profile]).exit
        assert.strictEqual(done.code, 2)
        assert.include(done.stderr, "endpoints[0].latency.medianMs")
      } finally {
        fs.rmSync(profile, { force: true })
      }
    }))

  const chat = (baseUrl: string, model: string, content: string) =>
    fetch(`${baseUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer k", "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content }] })
    }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }))

  it.live("serves the built-in model profiles by default; other model names keep the default behaviour", () =>
    Effect.promise(async () => {
      const run = start(["mock-llm", "--endpoints", "1", "--latency-ms", "0", "--no-storms"])
      try {
        const ready = JSON.parse(await run.first)
        assert.deepStrictEqual(ready.models, ["small", "medium", "large"])
        const baseUrl = ready.endpoints[0].baseUrl
        const small = await chat(baseUrl, "small", "Subject: Re: cvs\n\nBob wrote: ok. Answer in one word.")
        assert.strictEqual(small.status, 200)
        assert.closeTo(small.body.usage.cost, (small.body.usage.prompt_tokens * 0.00015 + small.body.usage.completion_tokens * 0.0006) / 1000, 1e-9)
        const other = await chat(baseUrl, "m", "x")
        assert.strictEqual(other.status, 200)
        assert.notProperty(other.body.usage, "cost")
        const models = (await (await fetch(`${baseUrl}/models`)).json()) as any
        assert.deepStrictEqual(models.data.map((m: any) => m.id), ["mock-spam-1", "small", "medium", "large"])
        run.kill("SIGTERM")
        assert.strictEqual((await run.exit).code, 0)
      } finally {
        run.kill("SIGKILL")
      }
    }))

  it.live("--models FILE (YAML; alias --profiles, TOML): the declared models only, 404 for the others", () =>
    Effect.promise(async () => {
      const yaml = tmp("models.yaml")
      fs.writeFileSync(yaml, [
        "models:",
        "  - name: cheap",
        "    accuracy: 0.7",
        "    pricing: { promptPer1k: 0.001, completionPer1k: 0.002 }",
        "    rateLimit: { rps: 0.001, burst: 1 }",
        "  - { name: pricey, accuracy: 0.99, pricing: { promptPer1k: 0.01 } }"
      ].join("\n"))
      const toml = tmp("models.toml")
      fs.writeFileSync(toml, "unknownModel = \"default\"\n[[models]]\nname = \"solo\"\naccuracy = 0.5\n")
      const runs: Array<Running> = []
      try {
        const run = start(["mock-llm", "--endpoints", "1", "--latency-ms", "0", "--no-storms", "--models", yaml])
        runs.push(run)
        const ready = JSON.parse(await run.first)
        assert.deepStrictEqual(ready.models, ["cheap", "pricey"])
        const baseUrl = ready.endpoints[0].baseUrl
        const first = await chat(baseUrl, "cheap", "hello")
        assert.strictEqual(first.status, 200)
        assert.strictEqual(first.body.usage.cost, (first.body.usage.prompt_tokens * 0.001 + first.body.usage.completion_tokens * 0.002) / 1000)
        // its rate limit of 1 request per 1,000 s (whatever the machine's load, no refill in between)
        assert.strictEqual((await chat(baseUrl, "cheap", "hello again")).status, 429)
        assert.strictEqual((await chat(baseUrl, "pricey", "hello")).status, 200)
        const small = await chat(baseUrl, "small", "hello")
        assert.strictEqual(small.status, 404)
        assert.strictEqual(small.body.error.code, "model_not_found")
        assert.include(small.body.error.message, "Known models: mock-spam-1, cheap, pricey.")
        // the endpoint's own model keeps the default behaviour
        assert.strictEqual((await chat(baseUrl, "mock-spam-1", "hello")).status, 200)

        const second = start(["mock-llm", "--endpoints", "1", "--latency-ms", "0", "--no-storms", "--profiles", toml])
        runs.push(second)
        const ready2 = JSON.parse(await second.first)
        assert.deepStrictEqual(ready2.models, ["solo"])
        assert.strictEqual((await chat(ready2.endpoints[0].baseUrl, "anything", "hello")).status, 200)
        for (const r of runs) r.kill("SIGTERM")
        for (const r of runs) assert.strictEqual((await r.exit).code, 0)
      } finally {
        for (const r of runs) r.kill("SIGKILL")
        fs.rmSync(yaml, { force: true })
        fs.rmSync(toml, { force: true })
      }
    }))

  it.live("a bad --models file exits 2 naming the file and each field path (YAML, TOML, JSON syntax, suffix)", () =>
    Effect.promise(async () => {
      const files: Array<string> = []
      const write = (name: string, text: string) => {
        const f = tmp(name)
        fs.writeFileSync(f, text)
        files.push(f)
        return f
      }
      try {
        const yaml = write("bad.yaml", "models:\n  - name: a\n    accuracy: 1.5\n  - name: b\n    accuracy: 0.5\n    pricing: { promptPer1k: -1 }\n    colour: red\n")
        const bad = await start(["mock-llm", "--models", yaml]).exit
        assert.strictEqual(bad.code, 2)
        assert.include(bad.stderr, yaml)
        for (const p of ["models[0].accuracy", "models[1].pricing.promptPer1k", "models[1].colour"]) assert.include(bad.stderr, p)
        const toml = write("bad.toml", "unknownModel = \"ignore\"\n[[models]]\nname = \"a\"\n")
        const badToml = await start(["mock-llm", "--models", toml]).exit
        assert.strictEqual(badToml.code, 2)
        assert.include(badToml.stderr, "unknownModel")
        assert.include(badToml.stderr, "models[0].accuracy")
        const json = write("syntax.json", "{\n  \"models\": [\n    { \"name\": \"a\", }\n  ]\n}\n")
        const syntax = await start(["mock-llm", "--models", json]).exit
        assert.strictEqual(syntax.code, 2)
        assert.match(syntax.stderr, /syntax\.json:3:\d+/)
        const txt = write("models.txt", "models: []")
        const suffix = await start(["mock-llm", "--models", txt]).exit
        assert.strictEqual(suffix.code, 2)
        assert.include(suffix.stderr, "use .json, .yaml/.yml or .toml")
      } finally {
        for (const f of files) fs.rmSync(f, { force: true })
      }
    }))

  it.live("refuses a non-loopback host without --allow-remote (exit 2)", () =>
    Effect.promise(async () => {
      const done = await start(["mock-llm", "--host", "0.0.0.0"]).exit
      assert.strictEqual(done.code, 2)
      assert.include(done.stderr, "--allow-remote")
    }))
})
