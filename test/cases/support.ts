/**
 * Helpers of the provider cases (C8–C13 and the secret sweep): spawned `bin/assay` commands,
 * a spawned `assay mock-llm`, loopback HTTP servers and a loopback forward proxy, store
 * queries. Everything binds 127.0.0.1; nothing needs the network.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export const root = fileURLToPath(new URL("../../", import.meta.url))
export const bin = path.join(root, "bin/assay")

export interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** The environment of a spawned command: this process's, minus every proxy variable, plus `env` (undefined deletes). */
export const envOf = (env: Record<string, string | undefined> = {}): NodeJS.ProcessEnv => {
  const out: Record<string, string | undefined> = { ...process.env }
  for (const k of Object.keys(out)) if (/^(https?|no|all)_proxy$/i.test(k)) delete out[k]
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) delete out[k]
    else out[k] = v
  }
  return out as NodeJS.ProcessEnv
}

/** Runs `bin/assay ...args` to its end. */
export const assay = (args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}): Promise<Result> =>
  new Promise((resolve) => {
    const child = spawn(bin, [...args], { cwd: root, env: envOf(env), stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

/** A running child process that printed one line (its address) on stdout. */
export interface Spawned {
  readonly child: ChildProcess
  readonly first: string
  readonly output: () => { stdout: string; stderr: string }
  readonly stop: () => Promise<void>
}

/** Spawns `bin/assay ...args` and waits for its first stdout line. */
export const spawnUntilFirstLine = (args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}): Promise<Spawned> =>
  new Promise((resolve, reject) => {
    const child = spawn(bin, [...args], { cwd: root, env: envOf(env), stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    let done = false
    const closed = new Promise<void>((r) => child.on("close", () => r()))
    child.stdout!.on("data", (d: Buffer) => {
      stdout += d.toString()
      const nl = stdout.indexOf("\n")
      if (!done && nl >= 0) {
        done = true
        resolve({
          child,
          first: stdout.slice(0, nl),
          output: () => ({ stdout, stderr }),
          stop: () => {
            child.kill("SIGTERM")
            return closed
          }
        })
      }
    })
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()))
    child.on("close", (code) => {
      if (!done) reject(new Error(`assay ${args.join(" ")} exited ${code} before printing: ${stderr}`))
    })
  })

export const tmp = (): string => fs.mkdtempSync(path.join(os.tmpdir(), "assay-wire-"))

export const write = (dir: string, name: string, text: string): string => {
  const p = path.join(dir, name)
  fs.writeFileSync(p, text)
  return p
}

/** Starts `assay mock-llm` with a profile; returns its endpoints' base URLs by name. */
export const startMock = async (dir: string, profile: unknown) => {
  const file = write(dir, `profile-${Math.random().toString(36).slice(2)}.json`, JSON.stringify(profile))
  const s = await spawnUntilFirstLine(["mock-llm", "--profile", file, "--port", "0"])
  const ready = JSON.parse(s.first) as { url: string; port: number; endpoints: Array<{ name: string; baseUrl: string }> }
  return {
    ...s,
    url: ready.url,
    port: ready.port,
    baseUrl: (name: string) => ready.endpoints.find((e) => e.name === name)!.baseUrl,
    log: async (): Promise<Array<Record<string, unknown>>> =>
      ((await (await fetch(`${ready.url}/_mock/log`)).json()) as { entries: Array<Record<string, unknown>> }).entries
  }
}

/** A loopback HTTP server; `close` drops every connection. */
export const loopbackServer = async (handler: http.RequestListener) => {
  const server = http.createServer(handler)
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  const port = (server.address() as net.AddressInfo).port
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      })
  }
}

/**
 * A loopback forward proxy: CONNECT tunnels and absolute-URI requests, every one sent to
 * `127.0.0.1:targetPort` whatever host it names (the endpoint's host "resolves only through
 * the proxy"). `seen` lists each request's target (`CONNECT host:port` or the absolute URI).
 */
export const forwardProxy = async (targetPort: number) => {
  const seen: Array<string> = []
  const server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`)
    const u = new URL(req.url ?? "/")
    const upstream = http.request(
      { host: "127.0.0.1", port: targetPort, method: req.method, path: `${u.pathname}${u.search}`, headers: req.headers },
      (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers)
        r.pipe(res)
      }
    )
    upstream.on("error", () => res.destroy())
    req.pipe(upstream)
  })
  server.on("connect", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    seen.push(`CONNECT ${req.url}`)
    const upstream = net.connect(targetPort, "127.0.0.1", () => {
      socket.write("HTTP/1.1 200 Connection Established\r\n\r\n")
      if (head.length > 0) upstream.write(head)
      upstream.pipe(socket)
      socket.pipe(upstream)
    })
    upstream.on("error", () => socket.destroy())
    socket.on("error", () => upstream.destroy())
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  const port = (server.address() as net.AddressInfo).port
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      })
  }
}

/** The rows of a read-only query on a store file (see `test/support/cli.ts`). */
export { query } from "../support/cli.js"

/** An experiment with one pool `llm` and one chat task over `range: n` rows ("item <i>"). */
export const chatExperiment = (o: {
  readonly store: string
  readonly n: number
  readonly resources: ReadonlyArray<Record<string, unknown>>
  readonly retry?: Record<string, unknown> | undefined
  readonly concurrency?: number | undefined
  readonly pool?: Record<string, unknown> | undefined
  readonly template?: string | undefined
}): string =>
  JSON.stringify({
    run: { store: o.store, concurrency: o.concurrency ?? 16 },
    pools: { llm: { ...o.pool, resources: o.resources } },
    pipeline: {
      name: "wire",
      tasks: [{
        use: "chat",
        options: { template: o.template ?? "item {{.}}", requestTimeout: "10 seconds" },
        ...(o.retry !== undefined ? { retry: o.retry } : {})
      }]
    },
    source: { range: { n: o.n } }
  }, null, 2)

/** A chat completion body answering `content`. */
export const completion = (content: string) =>
  JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion",
    model: "m",
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }
  })
