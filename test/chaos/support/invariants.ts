/**
 * What every chaos scenario asserts at its end (research/distributed.md §7, I1–I5), from the
 * database and the fake provider's log (the ground truth):
 *
 * - I1 nothing lost: every pipeline terminal (`succeeded`, or `failed` only where the scenario
 *   allows it), one checkpoint per (pipeline, task);
 * - I2 no duplicate checkpoint (one active output artifact and one active task row per
 *   (pipeline, task)); no call, started after a fault, for a key committed before it; every key
 *   called more than once is within the allowance snapshotted at a fault (a call started
 *   before the fault whose checkpoint was not committed then: the at-least-once window);
 * - I3 peak in-flight per resource ≤ its capacity (as the provider saw it);
 * - I4 calls per quota window ≤ the quota (when the scenario has one);
 * - I5 every pool slot free within one lease TTL after the run.
 *
 * {@link atFault} makes each fault and takes its snapshot.
 */
import { assert } from "vitest"
import { sleep } from "../../support/cli.js"
import type { Cluster } from "./cluster.js"
import { TASKS } from "./cluster.js"
import type { FakeProvider } from "./provider.js"

/** The pool lease TTL of the harness's runners: `assay runner`'s default (they pass no `--lease-ttl`). */
export const LEASE_TTL_MS = 30_000

/** `pipeline_id → row` (the seed artifact's payload: the range source's number). */
export const rowsOf = (cluster: Cluster): Map<string, string> => {
  const out = new Map<string, string>()
  const text = cluster.sql("SELECT pipeline_id, convert_from(payload, 'UTF8') FROM assay_artifacts WHERE seq = -1")
  for (const line of text.split("\n")) {
    if (line === "") continue
    const bar = line.indexOf("|")
    const id = line.slice(0, bar)
    const payload = line.slice(bar + 1)
    out.set(id, String(JSON.parse(payload)))
  }
  return out
}

/**
 * The keys (`task|row`) whose checkpoints are committed now; a revisit's (control experiments:
 * `a` called again with `"<row>#<visit>"`) is `task|row#visit`. A rewind deletes the
 * checkpoints of the stations it sends back to (they run again), so the task outputs stored
 * (kept as history) count too.
 */
export const committedKeys = (cluster: Cluster): Set<string> => {
  const rows = rowsOf(cluster)
  const out = new Set<string>()
  const committed = cluster.sql(
    `SELECT pipeline_id, seq, visit FROM assay_checkpoints UNION SELECT pipeline_id, seq, visit FROM assay_artifacts WHERE seq >= 0 AND seq < ${TASKS.length}`
  )
  for (const line of committed.split("\n")) {
    if (line === "") continue
    const [id, seq, visit] = line.split("|")
    const row = rows.get(id!)
    if (row === undefined) throw new Error(`checkpoint of unknown pipeline ${id}`)
    out.add(`${TASKS[Number(seq)]}|${row}${Number(visit) > 0 ? `#${visit}` : ""}`)
  }
  return out
}

/** Checkpoints committed now. */
export const committedCount = (cluster: Cluster): number => Number(cluster.sql("SELECT count(*) FROM assay_checkpoints").trim())

/** Slots held now (holder set, lease not expired). */
export const heldSlots = (cluster: Cluster): number =>
  Number(cluster.sql("SELECT count(*) FROM assay_pool_slot WHERE holder IS NOT NULL AND expires_at > now()").trim())

/** Slots held now per holder. */
export const heldBy = (cluster: Cluster): Map<string, number> => {
  const out = new Map<string, number>()
  const text = cluster.sql("SELECT holder, count(*) FROM assay_pool_slot WHERE holder IS NOT NULL AND expires_at > now() GROUP BY holder")
  for (const line of text.split("\n")) {
    if (line === "") continue
    const [h, n] = line.split("|")
    out.set(h!, Number(n))
  }
  return out
}

/** What was true at a fault. */
export interface Snapshot {
  /** Epoch ms just before the fault (when `committed` was read). */
  readonly at: number
  /** Epoch ms just after the fault was made. */
  readonly faultAt: number
  /** Keys (`task|row`) whose checkpoint was committed at `at`. */
  readonly committed: ReadonlySet<string>
  /**
   * Keys with a call started by `faultAt` and no checkpoint committed at `at`: the calls a
   * fault may repeat (the at-least-once window).
   */
  readonly allowance: ReadonlySet<string>
  /** Slots held (holder set, not expired) just before the fault. */
  readonly heldSlots: number
}

/** How long {@link atFault} lets requests written before the fault reach the provider's log (ms). */
const DRAIN_MS = 25

/**
 * Reads what is committed, makes the fault (`fault`), and takes the allowance of calls it may
 * repeat (see {@link Snapshot}).
 */
export const atFault = async (cluster: Cluster, provider: FakeProvider, fault: () => void | Promise<void>): Promise<Snapshot> => {
  const held = heldSlots(cluster)
  const at = Date.now()
  const committed = committedKeys(cluster)
  await fault()
  const faultAt = Date.now()
  // A request the faulted runner wrote to its socket just before the fault is in flight at the
  // fault, but the provider (in this process) logs it only when its event loop reads it, which
  // can be a few milliseconds after `faultAt`: drain that I/O before taking the allowance. The
  // allowance then also holds a call a healthy runner starts within the drain (at most
  // DRAIN_MS), the only slack this adds.
  await new Promise((resolve) => setTimeout(resolve, DRAIN_MS))
  const drained = Date.now()
  const allowance = new Set<string>()
  for (const c of provider.calls) if (c.start <= drained && !committed.has(c.key)) allowance.add(c.key)
  return { at, faultAt, committed, allowance, heldSlots: held }
}

/** Polls until `committedCount ≥ n` (the moment for a fault), at most `timeoutMs`. */
export const waitCommitted = async (cluster: Cluster, n: number, timeoutMs = 120_000): Promise<void> => {
  const t0 = Date.now()
  while (committedCount(cluster) < n) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${n} checkpoints (have ${committedCount(cluster)})`)
    await sleep(100)
  }
}

/** Options of {@link assertInvariants}. */
export interface Expect {
  readonly rows: number
  /** Capacity per resource id (I3). */
  readonly capacity: Readonly<Record<string, number>>
  readonly snapshots: ReadonlyArray<Snapshot>
  /** Pipelines allowed to end `failed` (default 0). */
  readonly failedAllowed?: number | undefined
  /** `{ limit, windowMs }` per resource id (I4). */
  readonly quota?: Readonly<Record<string, { readonly limit: number; readonly windowMs: number }>> | undefined
  /** Wait for free slots at most this long (I5; default one lease TTL + 5 s of slack for the load). */
  readonly slotsFreeWithinMs?: number | undefined
}

/** A summary of the run for the test's log: calls, repeats, peaks. */
export interface Outcome {
  readonly calls: number
  readonly keys: number
  readonly repeats: number
  readonly allowance: number
  readonly peak: Record<string, number>
  readonly slotsFreeAfterMs: number
}

/** Asserts I1–I5 (see the module header); returns what it measured. */
export const assertInvariants = async (cluster: Cluster, provider: FakeProvider, e: Expect): Promise<Outcome> => {
  // I1: every pipeline terminal, one checkpoint per (pipeline, task)
  const states = cluster.sql("SELECT state, count(*) FROM assay_pipelines GROUP BY state ORDER BY state")
  const byState = new Map(states.split("\n").filter((l) => l !== "").map((l) => {
    const [s, n] = l.split("|")
    return [s!, Number(n)] as const
  }))
  const total = Array.from(byState.values()).reduce((a, b) => a + b, 0)
  assert.strictEqual(total, e.rows, `pipelines: ${states}`)
  const terminal = (byState.get("succeeded") ?? 0) + (byState.get("failed") ?? 0)
  assert.strictEqual(terminal, e.rows, `every pipeline terminal: ${states}`)
  assert.isAtMost(byState.get("failed") ?? 0, e.failedAllowed ?? 0, `failed pipelines: ${states}`)
  const succeeded = byState.get("succeeded") ?? 0
  // I2: no duplicate checkpoint, output or task row
  const checkpoints = Number(cluster.sql("SELECT count(*) FROM assay_checkpoints").trim())
  assert.isAtLeast(checkpoints, succeeded * TASKS.length, "a checkpoint per task of every succeeded pipeline")
  const dupArtifacts = cluster.sql(
    "SELECT pipeline_id, seq, count(*) FROM assay_artifacts WHERE active = 1 AND seq >= 0 GROUP BY 1, 2 HAVING count(*) > 1"
  )
  assert.strictEqual(dupArtifacts, "", "one active output per (pipeline, task)")
  const dupTasks = cluster.sql(
    "SELECT pipeline_id, seq, count(*) FROM assay_tasks WHERE active = 1 AND state = 'succeeded' GROUP BY 1, 2 HAVING count(*) > 1"
  )
  assert.strictEqual(dupTasks, "", "one succeeded task row per (pipeline, task)")
  // I2: committed before a fault → never called after it
  for (const s of e.snapshots) {
    const late = provider.calls.filter((c) => c.start > s.faultAt && s.committed.has(c.key)).map((c) => c.key)
    assert.deepStrictEqual(late, [], `keys committed before the fault at ${s.faultAt} called again`)
  }
  // I2: repeats within the allowance
  // a call the provider refused (500: a dead resource) is retried by design; a repeat is a key
  // the provider served more than once
  const perKey = new Map<string, number>()
  for (const c of provider.calls) if (c.status !== 500) perKey.set(c.key, (perKey.get(c.key) ?? 0) + 1)
  const allowance = new Set<string>()
  for (const s of e.snapshots) for (const k of s.allowance) allowance.add(k)
  const repeated = Array.from(perKey.entries()).filter(([, n]) => n > 1)
  const faults = e.snapshots.map((s) => s.faultAt)
  const outside = repeated.filter(([k]) => !allowance.has(k)).map(([k, n]) =>
    `${k}×${n} (starts ${
      provider.calls.filter((c) => c.key === k).map((c) => `${c.resource}@${faults.map((f) => c.start - f).join("/")}ms`).join(", ")
    } from the fault)`
  )
  if (outside.length > 0) {
    // what the store says of those tasks: their attempts (outcome, error) and task rows
    const rows = rowsOf(cluster)
    const byRow = new Map(Array.from(rows.entries()).map(([id, row]) => [row, id]))
    const f0 = faults[0] ?? 0
    for (const [k] of repeated.filter(([k]) => !allowance.has(k))) {
      const [task, row] = k.split("|")
      const id = byRow.get(row!)
      const seq = TASKS.indexOf(task as (typeof TASKS)[number])
      console.error(`repeat ${k} (pipeline ${id}, seq ${seq}); attempts (ms from the first fault):\n${
        cluster.sql(
          `SELECT attempt_no, outcome, error_class, left(error_message, 160), started_at - ${f0}, ended_at - ${f0}, lease_ids FROM assay_attempts WHERE pipeline_id = '${id}' AND seq = ${seq} ORDER BY attempt_id`
        )
      }tasks:\n${
        cluster.sql(`SELECT state, attempts_used, active, started_at - ${f0}, error_class FROM assay_tasks WHERE pipeline_id = '${id}' AND seq = ${seq}`)
      }`)
    }
    console.error(`repeats outside the allowance: ${JSON.stringify(outside)}`)
  }
  assert.deepStrictEqual(outside, [], "keys called more than once outside the allowance snapshotted at the faults")
  const repeats = repeated.reduce((a, [, n]) => a + n - 1, 0)
  // I3: peak in flight ≤ capacity
  const peak: Record<string, number> = {}
  for (const [id, cap] of Object.entries(e.capacity)) {
    peak[id] = provider.peak(id)
    assert.isAtMost(provider.peak(id), cap, `peak in flight on ${id}`)
  }
  // I4: calls per window ≤ quota
  for (const [id, q] of Object.entries(e.quota ?? {})) {
    const over = Array.from(provider.perWindow(id, q.windowMs).entries()).filter(([, n]) => n > q.limit)
    assert.deepStrictEqual(over, [], `calls per ${q.windowMs} ms window on ${id} (limit ${q.limit})`)
  }
  // I5: every slot free within one TTL
  const t0 = Date.now()
  const within = e.slotsFreeWithinMs ?? LEASE_TTL_MS + 5_000
  while (heldSlots(cluster) > 0 && Date.now() - t0 < within) await sleep(250)
  const slotsFreeAfterMs = Date.now() - t0
  assert.strictEqual(heldSlots(cluster), 0, `slots still held ${slotsFreeAfterMs} ms after the run`)
  return { calls: provider.calls.length, keys: perKey.size, repeats, allowance: allowance.size, peak, slotsFreeAfterMs }
}
