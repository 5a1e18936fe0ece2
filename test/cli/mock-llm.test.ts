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
      const run = start(["mock-llm", "--endpoints", "1", "--rps", "1", "--burst", "1", "--latency-ms", "0"])
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

  it.live("refuses a non-loopback host without --allow-remote (exit 2)", () =>
    Effect.promise(async () => {
      const done = await start(["mock-llm", "--host", "0.0.0.0"]).exit
      assert.strictEqual(done.code, 2)
      assert.include(done.stderr, "--allow-remote")
    }))
})
