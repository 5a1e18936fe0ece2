/**
 * The chaos suite's ground truth (issue 17, research/distributed.md §7): a fake
 * OpenAI-compatible provider on 127.0.0.1 that the runners' `chat` tasks call, and that
 * records every call it receives.
 *
 * - One endpoint per resource: `POST /<resource>/v1/chat/completions`. The answer comes after
 *   `latencyMs`; its text echoes the request, so a pipeline's tasks chain.
 * - The call's key is its messages joined (`system` + `user`): the experiments of the suite
 *   put the task's name in the system message and the row in the user message, so the key is
 *   `"<task>|<row>"` ({@link keyOf}).
 * - Each call is logged with its resource, key, start and end (epoch ms) and status; peak
 *   in-flight per resource is tracked as calls arrive ({@link FakeProvider.peak}).
 * - {@link FakeProvider.kill} makes a resource answer 500 from then on (a resource that dies
 *   mid-run); {@link FakeProvider.revive} undoes it.
 *
 * The server is plain `node:http` (a test double, no framework): the harness runs in the
 * vitest process while the runners are child processes.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** One call as the provider saw it. */
export interface Call {
  readonly resource: string
  /** `"<task>|<row>"`: the system message, a bar, the user message. */
  readonly key: string
  /** Epoch ms when the request's body had arrived. */
  readonly start: number
  /** Epoch ms when the answer was sent; undefined while in flight (or the client went away first). */
  end: number | undefined
  status: number
  /** The client's port (which process called: `ss` maps it to a pid). */
  readonly remotePort?: number | undefined
}

/** The running provider. */
export interface FakeProvider {
  /** `http://127.0.0.1:PORT/<resource>/v1` */
  readonly baseUrl: (resource: string) => string
  readonly calls: ReadonlyArray<Call>
  /** The highest number of calls in flight at once on `resource` so far. */
  readonly peak: (resource: string) => number
  /** Calls in flight now, per resource. */
  readonly inFlight: (resource: string) => number
  /** `resource` answers 500 from now on. */
  readonly kill: (resource: string) => void
  readonly revive: (resource: string) => void
  /**
   * Calls per window: windows of `windowMs` aligned on the epoch (as Postgres `date_bin` from
   * 2000-01-01 UTC, for any window that divides a day), counted by arrival time.
   */
  readonly perWindow: (resource: string, windowMs: number) => Map<number, number>
  readonly close: () => Promise<void>
}

/** The key a call of task `task` on row `row` has (see the module header). */
export const keyOf = (task: string, row: string | number): string => `${task}|${row}`

/** Starts the provider on a free loopback port. `latencyMs`: time to answer each call. */
export const startProvider = async (options: {
  readonly latencyMs: number
  /**
   * A status to answer instead of 200 for the `n`th call (1-based) of `key` (e.g. 400: a fatal
   * failure of the task), or `undefined` to answer as usual.
   */
  readonly fail?: ((key: string, n: number) => number | undefined) | undefined
  /** The latency of the `n`th call of `key` (ms), instead of `latencyMs` (`undefined`: `latencyMs`). */
  readonly latencyOf?: ((key: string, n: number) => number | undefined) | undefined
}): Promise<FakeProvider> => {
  const calls: Array<Call> = []
  const live = new Map<string, number>()
  const peaks = new Map<string, number>()
  const dead = new Set<string>()
  const seen = new Map<string, number>()
  const sockets = new Set<import("node:net").Socket>()
  const server = http.createServer((req, res) => {
    const m = /^\/([^/]+)\/v1\/chat\/completions/.exec(req.url ?? "")
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      if (m === null || req.method !== "POST") {
        res.writeHead(404).end()
        return
      }
      const resource = m[1]!
      let body: { messages?: Array<{ role: string; content: string }>; model?: string } = {}
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
      } catch {
        res.writeHead(400).end()
        return
      }
      const messages = body.messages ?? []
      const system = messages.find((x) => x.role === "system")?.content ?? ""
      const user = messages.filter((x) => x.role !== "system").map((x) => x.content).join("\n")
      const call: Call = { resource, key: `${system}|${user}`, start: Date.now(), end: undefined, status: 0, remotePort: req.socket.remotePort }
      calls.push(call)
      const nth = (seen.get(call.key) ?? 0) + 1
      seen.set(call.key, nth)
      const failWith = options.fail?.(call.key, nth)
      const now = (live.get(resource) ?? 0) + 1
      live.set(resource, now)
      if (now > (peaks.get(resource) ?? 0)) peaks.set(resource, now)
      let done = false
      const finish = () => {
        if (done) return
        done = true
        live.set(resource, (live.get(resource) ?? 1) - 1)
      }
      res.on("close", finish)
      setTimeout(() => {
        if (failWith !== undefined) {
          call.status = failWith
          res.writeHead(failWith, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "refused by the test" } }))
        } else if (dead.has(resource)) {
          call.status = 500
          res.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "dead" } }))
        } else {
          call.status = 200
          res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({
            id: "x",
            object: "chat.completion",
            model: body.model ?? "fake",
            choices: [{ index: 0, message: { role: "assistant", content: `ok ${user}` }, finish_reason: "stop" }],
            usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 }
          }))
        }
        call.end = Date.now()
        finish()
      }, options.latencyOf?.(call.key, nth) ?? options.latencyMs)
    })
  })
  server.on("connection", (s) => {
    sockets.add(s)
    s.on("close", () => sockets.delete(s))
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    baseUrl: (resource) => `http://127.0.0.1:${port}/${resource}/v1`,
    calls,
    peak: (resource) => peaks.get(resource) ?? 0,
    inFlight: (resource) => live.get(resource) ?? 0,
    kill: (resource) => void dead.add(resource),
    revive: (resource) => void dead.delete(resource),
    perWindow: (resource, windowMs) => {
      const out = new Map<number, number>()
      for (const c of calls) {
        if (c.resource !== resource) continue
        const w = Math.floor(c.start / windowMs) * windowMs
        out.set(w, (out.get(w) ?? 0) + 1)
      }
      return out
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      })
  }
}
