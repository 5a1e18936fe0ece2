/**
 * A throwaway PostgreSQL server for tests: Debian's `postgresql` binaries (`initdb`, `pg_ctl`,
 * `createdb`), a data directory under the OS temp dir, loopback only, `fsync=off` (tests kill
 * processes, not the machine). The server refuses to run as root, so when the test process is
 * root every server command runs as the `postgres` user through `runuser` (the recipe of
 * `/work/shared/research/distributed.md` §7).
 *
 * The binaries are found in `ASSAY_PG_BIN`, else the newest `/usr/lib/postgresql/<v>/bin`, else
 * `PATH`. When none is found, {@link startPostgres} fails with a message saying how to install
 * them (`.ci/run` installs Debian's `postgresql` package): a Postgres test never passes by
 * skipping silently.
 *
 * Usage: `const pg = await startPostgres()` in `beforeAll`, `await pg.createDatabase("t1")` per
 * test (a fresh database each), `pg.url("t1")` for `PgClient`, `await pg.stop()` in `afterAll`.
 * {@link PgServer.restart} (`fast` or `immediate`) is for the chaos scenarios.
 *
 * This module does not import vitest, so that benchmarks (bench/cluster.ts) can start a server
 * too; `postgres.ts` adds the test-file hook `usePostgres` and re-exports this.
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"

/** A running test server. */
export interface PgServer {
  /** Always 127.0.0.1. */
  readonly host: string
  /** The TCP port it listens on. */
  readonly port: number
  /** The superuser it was initialised with (trust authentication on loopback). */
  readonly user: string
  /** The data directory (owned by `postgres` when the tests run as root). */
  readonly dataDir: string
  /** `postgres://user@127.0.0.1:port/<database>`. */
  readonly url: (database: string) => string
  /** Creates an empty database (fails if it exists). */
  readonly createDatabase: (database: string) => Promise<void>
  /** Runs SQL through `psql` as the superuser; returns its stdout (`-At`: unaligned, tuples only). */
  readonly psql: (database: string, sql: string) => string
  /** The postmaster's process id (changes after a restart). */
  readonly pid: () => number
  /** `pg_ctl restart -m <mode>`: `fast` closes sessions cleanly, `immediate` is a crash + recovery. */
  readonly restart: (mode: "fast" | "immediate") => Promise<void>
  /** Stops the server (`pg_ctl stop -m fast`), keeping its data, until {@link PgServer.start}. */
  readonly shutdown: () => Promise<void>
  /** Starts a server stopped by {@link PgServer.shutdown} again (same port, same data). */
  readonly start: () => Promise<void>
  /** Stops the server (immediate) and removes its directory. Idempotent. */
  readonly stop: () => Promise<void>
}

const isRoot = (): boolean => typeof process.getuid === "function" && process.getuid() === 0

/** The directory of the server binaries, or undefined when PostgreSQL is not installed. */
export const findPgBin = (): string | undefined => {
  const fromEnv = process.env.ASSAY_PG_BIN
  if (fromEnv && fs.existsSync(path.join(fromEnv, "initdb"))) return fromEnv
  const root = "/usr/lib/postgresql"
  if (fs.existsSync(root)) {
    const versions = fs.readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a))
    for (const v of versions) {
      const bin = path.join(root, v, "bin")
      if (fs.existsSync(path.join(bin, "initdb"))) return bin
    }
  }
  const which = spawnSync("sh", ["-c", "command -v initdb"], { encoding: "utf8" })
  const found = which.stdout.trim()
  return found ? path.dirname(found) : undefined
}

/** A TCP port free on loopback now (the kernel's choice: a fixed range collides with other processes' sockets). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/** Runs a server binary, as `postgres` when we are root. Throws with its output on failure. */
const runAsServerUser = (bin: string, args: ReadonlyArray<string>): string => {
  const [cmd, argv] = isRoot() ? ["runuser", ["-u", "postgres", "--", bin, ...args]] : [bin, [...args]]
  const r = spawnSync(cmd, argv, { encoding: "utf8", timeout: 60_000 })
  if (r.status !== 0) {
    throw new Error(`${path.basename(bin)} ${args.join(" ")} failed (${r.status ?? r.signal}): ${r.stderr}${r.stdout}`)
  }
  return r.stdout
}

const live: Array<PgServer> = []
let exitHookInstalled = false

/**
 * Starts a fresh server on a free loopback port. Takes ~1–3 s (initdb + start). Every server
 * started here is also stopped when the test process exits. `serverOptions` are added to the
 * server's command line (`-c name=value`, e.g. a benchmark's `pg_stat_statements`).
 */
export const startPostgres = async (
  options: { readonly user?: string; readonly serverOptions?: ReadonlyArray<string> } = {}
): Promise<PgServer> => {
  const binDir = findPgBin()
  if (binDir === undefined) {
    throw new Error(
      "PostgreSQL server binaries not found (initdb, pg_ctl): install Debian's `postgresql` package " +
        "(`apt-get install -y postgresql`, as .ci/run does) or set ASSAY_PG_BIN to their directory"
    )
  }
  const user = options.user ?? "assay"
  // Not under os.tmpdir(): the test run's temp root is private to root (mode 0700), which the
  // `postgres` user cannot enter; /tmp also keeps the Unix socket path short (limit ~107 bytes).
  const dir = fs.mkdtempSync(path.join(process.env.ASSAY_PG_TMPDIR ?? "/tmp", "assay-pg-"))
  if (isRoot()) {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim())
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim())
    fs.chownSync(dir, uid, gid)
  }
  const dataDir = path.join(dir, "data")
  const logFile = path.join(dir, "log")
  const port = await freePort()
  runAsServerUser(path.join(binDir, "initdb"), ["-D", dataDir, "-A", "trust", "-U", user, "-E", "UTF8", "--no-sync"])
  const serverOptions = [
    "-c listen_addresses=127.0.0.1",
    `-p ${port}`,
    `-k ${dir}`,
    // fsync off only: a commit still writes its WAL to the OS before it returns, so an
    // `immediate` restart (a crash of the server, not of the machine) keeps every commit.
    "-c fsync=off",
    "-c max_connections=200",
    ...(options.serverOptions ?? [])
  ].join(" ")
  const ctl = (args: ReadonlyArray<string>) => runAsServerUser(path.join(binDir, "pg_ctl"), ["-D", dataDir, ...args])
  ctl(["-l", logFile, "-w", "-t", "60", "-o", serverOptions, "start"])
  let stopped = false
  const readPid = (): number => Number(fs.readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0])
  const psqlBin = path.join(binDir, "psql")
  const server: PgServer = {
    host: "127.0.0.1",
    port,
    user,
    dataDir,
    url: (database) => `postgres://${user}@127.0.0.1:${port}/${database}`,
    createDatabase: async (database) => {
      runAsServerUser(path.join(binDir, "createdb"), ["-h", "127.0.0.1", "-p", String(port), "-U", user, database])
    },
    psql: (database, sql) => {
      const r = spawnSync(psqlBin, ["-h", "127.0.0.1", "-p", String(port), "-U", user, "-d", database, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql], {
        encoding: "utf8",
        timeout: 60_000
      })
      if (r.status !== 0) throw new Error(`psql failed: ${r.stderr}`)
      return r.stdout
    },
    pid: readPid,
    restart: async (mode) => {
      ctl(["-l", logFile, "-w", "-t", "60", "-m", mode, "-o", serverOptions, "restart"])
    },
    shutdown: async () => {
      ctl(["-w", "-t", "60", "-m", "fast", "stop"])
    },
    start: async () => {
      ctl(["-l", logFile, "-w", "-t", "60", "-o", serverOptions, "start"])
    },
    stop: async () => {
      if (stopped) return
      stopped = true
      try {
        ctl(["-w", "-m", "immediate", "stop"])
      } catch {
        // already down
      }
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
  live.push(server)
  if (!exitHookInstalled) {
    exitHookInstalled = true
    process.once("exit", () => {
      for (const s of live) {
        try {
          // synchronous best effort: the exit hook cannot await
          void s.stop()
        } catch {
          // ignore
        }
      }
    })
  }
  return server
}

