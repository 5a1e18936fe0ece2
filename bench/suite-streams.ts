/**
 * Full reads of a suite root's merged view (run: `npx tsx bench/suite-streams.ts [TREE]`;
 * prints JSON lines): `streamTasks`, `streamEvents` and `streamAttempts` with no limit over a
 * `byExperiment` root of BENCH_MEMBERS members (4) × BENCH_PIPELINES pipelines each (10,000),
 * 3 tasks, 3 events and 3 attempts per pipeline: what `assay export ROOT --rows tasks|events|
 * attempts` reads. Wall and CPU time (`process.cpuUsage`) per stream.
 *
 * The root is written once under BENCH_ROOT (default `$TMPDIR/assay-bench-suite-streams`) by
 * this checkout and reused. `TREE` (default: this checkout) is the assay checkout whose
 * `SuiteStore.makeRead` and `effect` read it: give another worktree to compare before/after,
 * alternating the two.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { fileURLToPath } from "node:url"

const here = nodePath.resolve(nodePath.dirname(fileURLToPath(import.meta.url)), "..")
const tree = nodePath.resolve(process.argv[2] ?? here)
const root = process.env["BENCH_ROOT"] ?? nodePath.join(os.tmpdir(), "assay-bench-suite-streams")
const N = Number(process.env["BENCH_PIPELINES"] ?? 10_000)
const members = Array.from({ length: Number(process.env["BENCH_MEMBERS"] ?? 4) }, (_, i) => `m${i}`)

const make = async () => {
  const { Effect } = await import("effect")
  const { NodeFileSystem } = await import("@effect/platform-node")
  const { PipelineRecord, TaskRecord } = await import("../src/domain/Records.js")
  const { PipelineId, RunId } = await import("../src/domain/Ids.js")
  const { memberPipelineId } = await import("../src/domain/Suite.js")
  const SuiteStore = await import("../src/layers/SuiteStore.js")
  const run = RunId.make("r")
  const pipeline = (id: string, i: number) =>
    new PipelineRecord({
      pipelineId: PipelineId.make(id), key: null, name: "d", state: "succeeded", nTasksDone: 3, nTasksTotal: 3, specDigest: "s",
      seedDigest: id, tags: {}, attemptsTotal: 3, runId: run, createdAt: i, updatedAt: i, startedAt: i, endedAt: i + 1,
      failedTask: null, errorType: null, errorMessage: null, errorClass: null
    })
  await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const { store } = yield* SuiteStore.make({ root, suiteId: "s", layout: "byExperiment", members })
    yield* store.openRun({ runId: run, startedAt: 0 })
    for (const m of members) {
      const ps = Array.from({ length: N }, (_, i) => pipeline(memberPipelineId("s", m, `k${i}`), i))
      for (let i = 0; i < N; i += 1000) yield* store.admit(ps.slice(i, i + 1000))
      yield* Effect.forEach(ps, (p, i) =>
        Effect.forEach([0, 1, 2], (seq) =>
          Effect.all([
            store.putTask(new TaskRecord({
              taskRunId: `${p.pipelineId}/${seq}`, pipelineId: p.pipelineId, runId: run, seq, taskName: `t${seq}`, state: "succeeded",
              attemptsUsed: 1, startedAt: i, endedAt: i + 1, durationMs: 1, errorType: null, errorMessage: null, errorClass: null, leaseIds: []
            })),
            store.emitEvent({ kind: "task.done", pipelineId: p.pipelineId, runId: run, data: { seq }, ts: i * 10 + seq }),
            store.recordAttempt({
              pipelineId: p.pipelineId, runId: run, taskRunId: `${p.pipelineId}/${seq}`, taskName: `t${seq}`, seq, attemptNo: 1,
              outcome: "succeeded", errorClass: null, errorType: null, errorMessage: null, decision: null, leaseIds: [],
              startedAt: i, endedAt: i + 1, durationMs: 1
            })
          ]), { discard: true }), { concurrency: 64, discard: true })
    }
    yield* store.finishRun(run, { status: "completed", endedAt: 1 })
  })).pipe(Effect.provide(NodeFileSystem.layer)))
}

if (!fs.existsSync(nodePath.join(root, "manifest.json"))) await make()

// the tree's own modules (its effect too: one Effect instance per run)
const { Effect, Stream } = await import(nodePath.join(tree, "node_modules/effect/dist/esm/index.js"))
const { NodeFileSystem } = await import(nodePath.join(tree, "node_modules/@effect/platform-node/dist/esm/index.js"))
const SuiteStore = await import(nodePath.join(tree, "src/layers/SuiteStore.ts"))
await Effect.runPromise(Effect.scoped(Effect.gen(function*(): Generator<any, void, any> {
  const { store } = yield* SuiteStore.makeRead(root)
  for (const kind of ["streamTasks", "streamEvents", "streamAttempts"]) {
    const t0 = performance.now()
    const c0 = process.cpuUsage()
    const rows = yield* Stream.runCount(store[kind]({}))
    const c = process.cpuUsage(c0)
    console.log(JSON.stringify({ tree, kind, members: members.length, rows, wall_ms: Math.round(performance.now() - t0), cpu_ms: Math.round((c.user + c.system) / 1000) }))
  }
})).pipe(Effect.provide(NodeFileSystem.layer)))
