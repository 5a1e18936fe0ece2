/**
 * Postgres's CPU split by process kind during a benchmark (bench/cluster.ts's `cluster.postgres`
 * line, BENCHMARKS.md pgp17an): the postmaster's children sampled from /proc (utime + stime),
 * each classified by its process title (`postgres: autovacuum worker`, `postgres: walwriter`,
 * `postgres: USER DB 127.0.0.1(PORT) idle`, …) and, for a client backend, by the process that
 * owns the other end of its connection (the client's socket with local port PORT, found in
 * /proc/net/tcp and then among the fds of the processes given as `owners`).
 *
 * A backend that exits between two samples keeps only the CPU seen at its last sample; what it
 * used after, and the whole of a backend that lived between two samples (a `psql` call's), goes
 * to the postmaster's children's time (cutime), reported as `exited_unseen`. A session's start
 * and end cost Postgres tens of ms of CPU (BENCHMARKS.md pgp17an), so `exited_unseen` follows
 * the connections opened and closed during the run.
 */
import * as fs from "node:fs"

/** Clock ticks per second of /proc's utime/stime (USER_HZ, 100 on Linux). */
const TICK = 100

/** utime + stime of `pid` in seconds (`children`: plus its exited children's), 0 when gone. */
const cpuOf = (pid: number, children = false): number => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(f[11]) + Number(f[12]) + (children ? Number(f[13]) + Number(f[14]) : 0)) / TICK
  } catch {
    return 0
  }
}

const ppidOf = (pid: number): number => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
  } catch {
    return -1
  }
}

const titleOf = (pid: number): string => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0+$/, "").replace(/\0/g, " ")
  } catch {
    return ""
  }
}

/** The inode of the loopback TCP socket whose local port is `port`, if any. */
const socketInode = (port: number): string | undefined => {
  const hex = port.toString(16).toUpperCase().padStart(4, "0")
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string
    try {
      text = fs.readFileSync(file, "utf8")
    } catch {
      continue
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/)
      if (f[1]?.endsWith(`:${hex}`)) return f[9]
    }
  }
  return undefined
}

/** Whether process `pid` holds the socket `inode`. */
const holds = (pid: number, inode: string): boolean => {
  try {
    const target = `socket:[${inode}]`
    for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
      try {
        if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === target) return true
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    // gone
  }
  return false
}

/** A live process of the benchmark that may hold Postgres connections, and its label. */
export interface Owner {
  readonly pid: number
  readonly label: string
}

/** Postgres CPU in seconds per process kind over the sampled interval. */
export interface PgCpuSplit {
  /** Seconds per kind (`client:runner`, `client:submitter`, `client:other`, `autovacuum worker`, `walwriter`, …). */
  readonly by_kind: Record<string, number>
  /** Backends seen per kind. */
  readonly processes: Record<string, number>
  /** The postmaster's own CPU. */
  readonly postmaster: number
  /** CPU of children that exited after their last sample (cutime growth less what was seen of them). */
  readonly exited_unseen: number
  /** Everything: the postmaster with all its children. */
  readonly total: number
}

/**
 * Starts sampling the children of `postmaster`; `owners()` lists the processes whose
 * connections are told apart (called when a new client backend appears). `sample()` takes one
 * sample (call it every second or so); `stop()` takes the last one and returns the split since
 * the start.
 */
export const pgProcessSampler = (postmaster: number, owners: () => ReadonlyArray<Owner>) => {
  interface Seen {
    readonly kind: string
    readonly start: number
    last: number
  }
  const seen = new Map<number, Seen>()
  const start0 = cpuOf(postmaster, true)
  const own0 = cpuOf(postmaster)
  const children = (): Array<number> =>
    fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d)).map(Number).filter((pid) => ppidOf(pid) === postmaster)
  const kindOf = (pid: number): string | undefined => {
    const full = titleOf(pid)
    // a backend just forked still has the postmaster's command line: classified at a later sample
    if (!full.startsWith("postgres:")) return undefined
    const title = full.replace(/^postgres:\s*/, "")
    const port = /\((\d+)\)/.exec(title)
    if (port === null) return title.replace(/\s+(idle|active|waiting).*$/, "").trim() || "unknown"
    const inode = socketInode(Number(port[1]))
    if (inode !== undefined) for (const o of owners()) if (holds(o.pid, inode)) return `client:${o.label}`
    return "client:other"
  }
  const sample = (initial = false) => {
    for (const pid of children()) {
      const cpu = cpuOf(pid)
      const s = seen.get(pid)
      if (s !== undefined) s.last = Math.max(s.last, cpu)
      else {
        const kind = kindOf(pid)
        if (kind !== undefined) seen.set(pid, { kind, start: initial ? cpu : 0, last: cpu })
      }
    }
  }
  sample(true)
  return {
    sample: () => sample(),
    stop: (): PgCpuSplit => {
      sample()
      const by: Record<string, number> = {}
      const n: Record<string, number> = {}
      let attributed = 0
      for (const s of seen.values()) {
        const d = s.last - s.start
        by[s.kind] = (by[s.kind] ?? 0) + d
        n[s.kind] = (n[s.kind] ?? 0) + 1
        attributed += d
      }
      // the postmaster's own and exited children's time, plus the live children's, less what
      // the children alive at the start had used before it
      const total = cpuOf(postmaster, true) - start0
      const alive = children().reduce((a, pid) => a + cpuOf(pid), 0)
      const aliveAtStart = Array.from(seen.values()).reduce((a, s) => a + s.start, 0)
      const all = total + alive - aliveAtStart
      const postmasterOwn = cpuOf(postmaster) - own0
      const round = (x: number) => +x.toFixed(2)
      return {
        by_kind: Object.fromEntries(Object.entries(by).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, round(v)])),
        processes: n,
        postmaster: round(postmasterOwn),
        exited_unseen: round(all - attributed - postmasterOwn),
        total: round(all)
      }
    }
  }
}

/** Autovacuum's CPU per table and operation, from the server log's `automatic vacuum/analyze` reports. */
export interface AutovacuumCpu {
  /** Seconds (user + system) per `vacuum TABLE` / `analyze TABLE`. */
  readonly by_table: Record<string, number>
  /** Operations per `vacuum TABLE` / `analyze TABLE`. */
  readonly runs: Record<string, number>
  /** All of them, seconds. */
  readonly total: number
}

/**
 * The CPU autovacuum reported in the server log `text` (the server started with
 * `log_autovacuum_min_duration=0`: each automatic vacuum and analyze logs its
 * `system usage: CPU: user: U s, system: S s`, in hundredths of a second).
 */
export const autovacuumCpu = (text: string): AutovacuumCpu => {
  const by: Record<string, number> = {}
  const runs: Record<string, number> = {}
  let total = 0
  const re = /automatic (vacuum|analyze) of table "(?:[^".]+\.)?(?:[^".]+\.)?([^"]+)"[\s\S]*?system usage: CPU: user: ([\d.]+) s, system: ([\d.]+) s/g
  for (const m of text.matchAll(re)) {
    const key = `${m[1]} ${m[2]}`
    const cpu = Number(m[3]) + Number(m[4])
    by[key] = +((by[key] ?? 0) + cpu).toFixed(2)
    runs[key] = (runs[key] ?? 0) + 1
    total += cpu
  }
  return {
    by_table: Object.fromEntries(Object.entries(by).sort((a, b) => b[1] - a[1])),
    runs,
    total: +total.toFixed(2)
  }
}
