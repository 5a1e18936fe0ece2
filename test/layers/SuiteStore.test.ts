import { NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Chunk, Effect, Either, Exit, Layer, Option, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import type { PipelineId, RunId } from "../../src/domain/Ids.js"
import type { TaskStore } from "../../src/domain/TaskStore.js"
import { usageAccumulator } from "../../src/services/internal/store/shared.js"
import { memberDigest, memberDigestOf, memberPipelineId } from "../../src/domain/Suite.js"
import type { SuiteLayout } from "../../src/domain/Suite.js"
import type { EventRecord } from "../../src/domain/Records.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as SuiteStore from "../../src/layers/SuiteStore.js"
import { Store } from "../../src/services/Store.js"
import { artifact, controlledToRewind, event, ledgerRow, pipeline, setWriteFailure, type StoreHarness, storeContract, task } from "./StoreContract.js"
import * as Traversal from "../../src/domain/Traversal.js"
import { rid } from "../support/ids.js"

const tempRoot = () => nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-suite-")), "root")

const SUITE = "cmp"
const mpid = (member: string, local: string): PipelineId => memberPipelineId(SUITE, member, local)
const mpipe = (member: string, local: string, over: Parameters<typeof pipeline>[1] = {}) =>
  pipeline(mpid(member, local), { suiteId: SUITE, experimentId: member, localKey: local, ...over })

/** Opens a suite store for the body's duration. */
const withSuite = <A, E>(
  o: Partial<SuiteStore.SuiteStoreOptions> & { readonly root: string },
  body: (h: SuiteStore.SuiteStoreHandle) => Effect.Effect<A, E>
) =>
  Effect.scoped(
    Effect.flatMap(
      SuiteStore.make({ suiteId: SUITE, layout: "byExperiment", members: ["a", "b", "c"], flushIntervalMs: 0, ...o }),
      body
    )
  ).pipe(Effect.provide(NodeFileSystem.layer))

const bytesOf = (file: string) => fs.readFileSync(file)
const rows = (file: string, sql: string) => {
  const db = new Database(file, { readonly: true, fileMustExist: true })
  try {
    return db.prepare(sql).all() as Array<Record<string, unknown>>
  } finally {
    db.close()
  }
}

// with a write policy, as the runner opens runs (it reconfigures each database's write-behind)
const newRun = (runId: string, startedAt = 1000) => ({
  runId: rid(runId),
  startedAt,
  writes: { writeBehind: true, batchSize: 64, flushIntervalMs: 60_000 }
})

/** Writes a run over the given members: run row, pipelines, a checkpoint each, a pool event. */
const runOver = (store: Store["Type"], runId: string, members: ReadonlyArray<string>, n = 2) =>
  Effect.gen(function*() {
    yield* store.openRun(newRun(runId))
    for (const m of members) {
      const ps = Array.from({ length: n }, (_, i) => mpipe(m, `k${i}`, { runId: rid(runId) }))
      yield* store.admit(ps)
      for (const p of ps) {
        yield* store.checkpoint({
          pipelineId: p.pipelineId,
          task: task(p.pipelineId, 0),
          artifact: artifact(p.pipelineId, 0, new TextEncoder().encode(`"${m}"`), true),
          pipeline: { state: "succeeded", nTasksDone: 1, updatedAt: 2000, endedAt: 2000 },
          events: [event("task.end", p.pipelineId, 2000, runId)]
        })
      }
    }
    yield* store.emitEvent(event("pool.health", null, 2500, runId))
    yield* store.finishRun(rid(runId), { status: "completed", endedAt: 3000 })
  })

describe("SuiteStore", () => {
  it.effect("combined: manifest.json, one state.db holding pipelines and the catalog; no secrets in the manifest", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* withSuite({ root, layout: "combined", artifactBackend: "file" }, ({ catalog, store }) =>
        Effect.gen(function*() {
          yield* catalog.registerMembers([
            { experimentId: "a", definitionDigest: "d-a", label: "Baseline", limit: null },
            { experimentId: "b", definitionDigest: "d-b", label: null, limit: 10 }
          ], 500)
          yield* runOver(store, "r1", ["a", "b"])
          assert.strictEqual(catalog.outputDirOf("a"), nodePath.resolve(root))
          assert.strictEqual(catalog.layout, "combined")
        }))
      assert.deepStrictEqual(fs.readdirSync(root).sort(), ["artifacts", "manifest.json", "state.db"])
      const manifest = JSON.parse(fs.readFileSync(nodePath.join(root, "manifest.json"), "utf8"))
      assert.deepStrictEqual(manifest, { layoutVersion: 1, suiteId: SUITE, layout: "combined", catalog: "state.db", artifactBackend: "file" })
      const db = nodePath.join(root, "state.db")
      assert.deepStrictEqual(rows(db, "SELECT experiment_id, definition_digest, label, member_limit FROM suite_members ORDER BY 1"), [
        { experiment_id: "a", definition_digest: "d-a", label: "Baseline", member_limit: null },
        { experiment_id: "b", definition_digest: "d-b", label: null, member_limit: 10 }
      ])
      assert.deepStrictEqual(
        rows(db, "SELECT experiment_id, local_key, suite_id FROM pipelines ORDER BY experiment_id, local_key").map((r) => Object.values(r)),
        [["a", "k0", SUITE], ["a", "k1", SUITE], ["b", "k0", SUITE], ["b", "k1", SUITE]]
      )
    }))

  it.effect("byExperiment: writes are routed by member; runs go to the catalog and every selected member; pipeline-less events to suite.db", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* withSuite({ root }, ({ catalog, store }) =>
        Effect.gen(function*() {
          yield* runOver(store, "r1", ["a", "b"])
          assert.strictEqual(catalog.outputDirOf("b"), nodePath.join(nodePath.resolve(root), "experiments", "b"))
          // the merged view
          const all = Chunk.toArray(yield* Stream.runCollect(store.streamPipelines()))
          assert.strictEqual(all.length, 4)
          const st = yield* store.stats()
          assert.strictEqual(st.pipelines, 4)
          assert.strictEqual(st.byState.succeeded, 4)
          assert.strictEqual(st.tasks, 4)
          assert.strictEqual(st.events, 5)
          const got = yield* store.getPipelines([mpid("a", "k0"), mpid("b", "k1"), mpid("c", "k0")])
          assert.deepStrictEqual(Array.from(got.keys()).sort(), [mpid("a", "k0"), mpid("b", "k1")].sort())
          const art = Option.getOrThrow(yield* store.getArtifact(mpid("b", "k1"), 0))
          assert.strictEqual(new TextDecoder().decode(art.payload), `"b"`)
          const member = yield* catalog.view("a")
          assert.strictEqual((yield* member.stats()).pipelines, 2)
          assert.strictEqual(yield* member.countEvents(), 2)
        }))
      assert.deepStrictEqual(fs.readdirSync(root).sort(), ["experiments", "manifest.json", "suite.db"])
      // the selected member "c" got its database and run row at openRun, with no pipelines
      assert.deepStrictEqual(fs.readdirSync(nodePath.join(root, "experiments")).sort(), ["a", "b", "c"])
      const fileOf = (m: string) => nodePath.join(root, "experiments", m, "state.db")
      for (const m of ["a", "b"]) {
        assert.deepStrictEqual(rows(fileOf(m), "SELECT DISTINCT experiment_id AS e FROM pipelines"), [{ e: m }])
        assert.deepStrictEqual(rows(fileOf(m), "SELECT run_id, status FROM runs"), [{ run_id: "r1", status: "completed" }])
        assert.strictEqual(rows(fileOf(m), "SELECT count(*) AS n FROM events WHERE pipeline_id IS NULL")[0]!.n, 0)
      }
      assert.strictEqual(rows(fileOf("c"), "SELECT count(*) AS n FROM pipelines")[0]!.n, 0)
      const suiteDb = nodePath.join(root, "suite.db")
      assert.strictEqual(rows(suiteDb, "SELECT count(*) AS n FROM pipelines")[0]!.n, 0)
      assert.deepStrictEqual(rows(suiteDb, "SELECT kind FROM events"), [{ kind: "pool.health" }])
      assert.deepStrictEqual(rows(suiteDb, "SELECT run_id, status FROM runs"), [{ run_id: "r1", status: "completed" }])
      assert.deepStrictEqual(rows(suiteDb, "SELECT experiment_id FROM suite_member_dbs ORDER BY 1"), [
        { experiment_id: "a" },
        { experiment_id: "b" },
        { experiment_id: "c" }
      ])
    }))

  it.effect("a selective run writes only the selected member: the others' files stay byte-identical (not even migrated), and writing them is refused", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* withSuite({ root }, ({ store }) => runOver(store, "r1", ["a", "b", "c"]))
      const fileOf = (m: string) => nodePath.join(root, "experiments", m, "state.db")
      // make "c" look like an older store: a writer would migrate it
      const old = new Database(fileOf("c"))
      old.exec("UPDATE store_meta SET value = '6' WHERE key = 'schema_version'")
      old.close()
      const before = { b: bytesOf(fileOf("b")), c: bytesOf(fileOf("c")) }
      yield* withSuite({ root, selected: ["a"] }, ({ store }) =>
        Effect.gen(function*() {
          yield* store.openRun(newRun("r2", 5000))
          yield* store.admit([mpipe("a", "k9", { runId: rid("r2") })])
          // reads of the other members open them read-only
          assert.strictEqual((yield* store.stats()).pipelines, 7)
          assert.strictEqual((yield* store.events({ limit: 100 })).length, 7)
          const refused = yield* Effect.exit(store.admit([mpipe("b", "k9")]))
          assert.isTrue(Exit.isFailure(refused))
          assert.match(String(Exit.isFailure(refused) ? refused.cause : ""), /did not select/)
          yield* store.finishRun(rid("r2"), { status: "completed", endedAt: 6000 })
        }))
      assert.isTrue(bytesOf(fileOf("b")).equals(before.b))
      assert.isTrue(bytesOf(fileOf("c")).equals(before.c))
      assert.isFalse(fs.existsSync(`${fileOf("b")}-wal`))
      assert.deepStrictEqual(rows(fileOf("a"), "SELECT run_id FROM runs ORDER BY 1"), [{ run_id: "r1" }, { run_id: "r2" }])
    }))

  it.effect("the writer lock proves earlier running runs dead: interruptStale marks them in the catalog and the selected members only", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      // a run that never finished (its process died): still `running` everywhere
      yield* withSuite({ root }, ({ store }) =>
        Effect.gen(function*() {
          yield* store.openRun(newRun("dead"))
          yield* store.admit([mpipe("a", "k0", { runId: rid("dead") }), mpipe("b", "k0", { runId: rid("dead") })])
        }))
      const fileOf = (m: string) => nodePath.join(root, "experiments", m, "state.db")
      const bBefore = bytesOf(fileOf("b"))
      yield* withSuite({ root, selected: ["a"] }, ({ store }) =>
        Effect.gen(function*() {
          assert.isTrue(store.exclusiveWriter)
          const stale = yield* store.interruptStale(0, 9000)
          assert.deepStrictEqual(stale.map((r) => [r.runId, r.status, r.endedAt]), [[rid("dead"), "interrupted", 9000]])
        }))
      const statusOf = (file: string) => rows(file, "SELECT status, ended_at FROM runs WHERE run_id = 'dead'")[0]
      assert.deepStrictEqual(statusOf(nodePath.join(root, "suite.db")), { status: "interrupted", ended_at: 9000 })
      assert.deepStrictEqual(statusOf(fileOf("a")), { status: "interrupted", ended_at: 9000 })
      assert.deepStrictEqual(statusOf(fileOf("b")), { status: "running", ended_at: null })
      assert.isTrue(bytesOf(fileOf("b")).equals(bBefore))
    }))

  it.effect("a missing member database refuses a run selecting it, reads as empty otherwise, and is never recreated", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* withSuite({ root }, ({ store }) => runOver(store, "r1", ["a", "b"]))
      const gone = nodePath.join(root, "experiments", "b", "state.db")
      fs.rmSync(gone)
      const resumed = yield* Effect.exit(withSuite({ root, selected: ["b"] }, ({ store }) => store.openRun(newRun("r2", 5000))))
      assert.isTrue(Exit.isFailure(resumed))
      assert.match(String(Exit.isFailure(resumed) ? resumed.cause : ""), /member "b".*missing.*never recreated/)
      assert.isFalse(fs.existsSync(gone))
      // a read of the merged view (nothing written): the healthy member, the missing one empty
      const [all, a] = yield* Effect.scoped(Effect.flatMap(SuiteStore.makeRead(root), (h) =>
        Effect.all([h.store.stats(), Effect.flatMap(h.catalog.view("a"), (v) => v.stats())]))).pipe(Effect.provide(NodeFileSystem.layer))
      assert.isAbove(a.pipelines, 0)
      assert.strictEqual(all.pipelines, a.pipelines)
      assert.isFalse(fs.existsSync(gone))
    }))

  it.effect("a root never changes its suite id, layout or backend; a directory of store files without a manifest is refused", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* withSuite({ root }, ({ store }) => runOver(store, "r1", ["a"]))
      const before = bytesOf(nodePath.join(root, "suite.db"))
      const pathOf = (o: Partial<SuiteStore.SuiteStoreOptions>) =>
        Effect.map(Effect.flip(withSuite({ root, ...o }, () => Effect.void)), (e) => e._tag === "ConfigError" ? e.issues[0]?.path : e._tag)
      assert.strictEqual(yield* pathOf({ suiteId: "other" }), "suite.id")
      assert.strictEqual(yield* pathOf({ layout: "combined" }), "output.layout")
      assert.strictEqual(yield* pathOf({ artifactBackend: "file" }), "run.artifactBackend")
      assert.isTrue(bytesOf(nodePath.join(root, "suite.db")).equals(before))
      const plain = tempRoot()
      fs.mkdirSync(plain, { recursive: true })
      fs.writeFileSync(nodePath.join(plain, "state.db"), "")
      assert.strictEqual(yield* Effect.map(Effect.flip(withSuite({ root: plain }, () => Effect.void)), (e) => e._tag === "ConfigError" ? e.issues[0]?.path : e._tag), "output.root")
    }))

  for (const layout of ["combined", "byExperiment"] as const) {
    it.effect(`${layout}: registerMembers refuses a changed digest and writes nothing; membership facts upsert field by field`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        yield* withSuite({ root, layout }, ({ catalog }) =>
          Effect.gen(function*() {
            yield* catalog.registerMembers([{ experimentId: "a", definitionDigest: "d1", label: null, limit: null }], 100)
            const e = yield* Effect.flip(catalog.registerMembers([
              { experimentId: "b", definitionDigest: "d2", label: null, limit: null },
              { experimentId: "a", definitionDigest: "CHANGED", label: null, limit: null }
            ], 200))
            assert.strictEqual(e._tag, "ConfigError")
            assert.deepStrictEqual(e._tag === "ConfigError" ? e.issues.map((i) => i.path) : [], ["experiments.a"])
            assert.deepStrictEqual((yield* catalog.members).map((m) => [m.experimentId, m.definitionDigest, m.createdAt]), [["a", "d1", 100]])
            yield* catalog.recordMembership(rid("r1"), "a", { selected: true }, 300)
            yield* catalog.recordMembership(rid("r1"), "a", { admitted: 5, sourceError: "boom" }, 400)
            yield* catalog.recordMembership(rid("r1"), "b", { limitReached: true }, 410)
            const ms = yield* catalog.membership(rid("r1"))
            assert.deepStrictEqual(ms.map((m) => ({ ...m })), [
              { runId: rid("r1"), experimentId: "a", selected: true, admitted: 5, sourceExhausted: false, sourceError: "boom", limitReached: false, updatedAt: 400 },
              { runId: rid("r1"), experimentId: "b", selected: false, admitted: 0, sourceExhausted: false, sourceError: null, limitReached: true, updatedAt: 410 }
            ])
            const unknown = yield* Effect.flip(catalog.view("zz"))
            assert.strictEqual(unknown._tag === "ConfigError" ? unknown.issues[0]?.path : "", "experiment")
          }))
      }))

    it.effect(`${layout}: a refused definition change names the changed parts (one line each); without stored parts, the digests`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        yield* withSuite({ root, layout }, ({ catalog }) =>
          Effect.gen(function*() {
            const parts = {
              tasks: "t1",
              source: "s1",
              limit: "none",
              "bindings.apis": "shared",
              "pools.apis": "p1",
              "field:source.range.n": "n1",
              "field:source.repeats": "r1",
              "field:pools.apis.resources[0].id": "i1"
            }
            yield* catalog.registerMembers([
              { experimentId: "a", definitionDigest: "d1", definitionParts: parts, label: null, limit: null },
              { experimentId: "b", definitionDigest: "d2", label: null, limit: null }
            ], 100)
            assert.deepStrictEqual((yield* catalog.members).map((m) => m.definitionParts), [parts, null])
            const e = yield* Effect.flip(catalog.registerMembers([
              {
                experimentId: "a",
                definitionDigest: "d9",
                definitionParts: {
                  ...parts,
                  tasks: "t2",
                  source: "s2",
                  limit: "5",
                  "bindings.apis": "(private)",
                  "pools.apis": "p2",
                  "field:source.range.n": "n2",
                  "field:pools.apis.resources[0].id": "i2",
                  "field:pools.apis.resources[1].id": "i3"
                },
                label: null,
                limit: null
              },
              { experimentId: "b", definitionDigest: "d8", definitionParts: parts, label: null, limit: null }
            ], 200))
            const lines = e.message.split("\n")
            assert.strictEqual(lines.length, 2)
            // in words: which part, the fields when recorded, old -> new (field leaves are not parts of their own)
            assert.include(
              lines[0]!,
              "experiments.a: the definition of member \"a\" changed: " +
                "its pipeline definition (tasks, their versions, options or control: spec t1 -> t2); " +
                "its source (field range.n: s1 -> s2); " +
                "its pool \"apis\" (binding: shared pool \"shared\" -> private); " +
                "its pool \"apis\" (declaration, fields resources[0].id, resources[1].id: p1 -> p2); " +
                "its run options (limit: none -> 5). " +
                "A member id keeps its definition for life"
            )
            assert.notInclude(lines[0]!, "field:")
            assert.include(lines[1]!, "experiments.b: the definition of member \"b\" changed (stored digest d2, now d8;")
            // an unchanged member registered without parts gets them recorded
            yield* catalog.registerMembers([{ experimentId: "b", definitionDigest: "d2", definitionParts: parts, label: null, limit: null }], 300)
            assert.deepStrictEqual((yield* catalog.members).map((m) => m.definitionParts), [parts, parts])
          }))
      }))

    it.effect(`${layout}: a member registered under a previous digest of its definition matches and is upgraded; another digest is still refused`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        yield* withSuite({ root, layout }, ({ catalog }) =>
          Effect.gen(function*() {
            yield* catalog.registerMembers([{ experimentId: "a", definitionDigest: "v1", label: null, limit: null }], 100)
            yield* catalog.registerMembers([
              { experimentId: "a", definitionDigest: "v2", definitionParts: { tasks: "t" }, previousDigests: ["v1"], label: null, limit: null }
            ], 200)
            assert.deepStrictEqual((yield* catalog.members).map((m) => [m.definitionDigest, m.definitionParts, m.createdAt]), [["v2", { tasks: "t" }, 100]])
            // upgraded: the current digest matches from now on, the old one no longer names it
            yield* catalog.registerMembers([{ experimentId: "a", definitionDigest: "v2", label: null, limit: null }], 300)
            const e = yield* Effect.flip(catalog.registerMembers([
              { experimentId: "a", definitionDigest: "v3", previousDigests: ["v1"], label: null, limit: null }
            ], 400))
            assert.include(e.message, "the definition of member \"a\" changed")
          }))
      }))

    it.effect(`${layout}: the SQLite store itself refuses a plain writer on the root's databases (ConfigError, path store); reading them is fine`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        yield* withSuite({ root, layout }, ({ store }) => runOver(store, "r1", ["a", "b"]))
        const files = layout === "combined"
          ? [nodePath.join(root, "state.db")]
          : [nodePath.join(root, "suite.db"), nodePath.join(root, "experiments/a/state.db")]
        // a new file in the root is refused too: nothing may be created there by a plain store
        for (const file of [...files, nodePath.join(root, "other.db")]) {
          const before = fs.existsSync(file) ? bytesOf(file) : undefined
          const e = yield* Effect.flip(Effect.scoped(Effect.flatMap(Store, (s) => s.listRuns)).pipe(
            Effect.provide(SqliteStore.layer({ filename: file }))
          ))
          assert.strictEqual(e._tag, "ConfigError", file)
          assert.strictEqual(e._tag === "ConfigError" ? e.issues[0]?.path : "", "store")
          assert.include(e.message, `belongs to suite "${SUITE}" (output root ${root})`)
          assert.deepStrictEqual(fs.existsSync(file) ? bytesOf(file) : undefined, before, "nothing written")
          assert.isFalse(fs.existsSync(`${file}.lock`), "no lock taken")
        }
        for (const file of files) {
          const runs = yield* Effect.scoped(Effect.flatMap(Store, (s) => s.listRuns)).pipe(
            Effect.provide(SqliteStore.layerReadOnly(file))
          )
          assert.isAtLeast(runs.length, 1, file)
        }
        // the suite itself still writes them
        yield* withSuite({ root, layout }, ({ store }) => runOver(store, "r2", ["a"]))
      }))

    it.effect(`${layout}: a member id equal to a registered one ignoring case but spelled differently is refused; nothing is written`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        yield* withSuite({ root, layout, members: ["alpha"] }, ({ catalog, store }) =>
          Effect.gen(function*() {
            yield* catalog.registerMembers([{ experimentId: "alpha", definitionDigest: "d1", label: null, limit: null }], 100)
            yield* runOver(store, "r1", ["alpha"], 1)
          }))
        const before = fs.readdirSync(layout === "combined" ? root : nodePath.join(root, "experiments")).sort()
        const e = yield* Effect.flip(withSuite({ root, layout, members: ["Alpha"] }, ({ catalog }) =>
          catalog.registerMembers([{ experimentId: "Alpha", definitionDigest: "d1", label: null, limit: null }], 200)))
        assert.strictEqual(e._tag, "ConfigError")
        assert.deepStrictEqual(e._tag === "ConfigError" ? e.issues.map((i) => i.path) : [], ["experiments.Alpha"])
        assert.include(e.message, "\"alpha\"")
        assert.deepStrictEqual(fs.readdirSync(layout === "combined" ? root : nodePath.join(root, "experiments")).sort(), before)
        yield* withSuite({ root, layout, members: ["alpha"], readOnly: true }, ({ catalog }) =>
          Effect.map(catalog.members, (ms) => assert.deepStrictEqual(ms.map((m) => m.experimentId), ["alpha"])))
      }))

    it.effect(`${layout}: read-only opens (layerRead) see the merged view and one member's; every write is refused`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        yield* withSuite({ root, layout }, ({ store }) => runOver(store, "r1", ["a", "b"], 3))
        const read = (experiment?: string) =>
          Effect.scoped(Effect.flatMap(SuiteStore.makeRead(root, { experiment }), (h) =>
            Effect.gen(function*() {
              const st = yield* h.store.stats()
              const evs = yield* h.store.events({ limit: 50 })
              const write = yield* Effect.exit(h.store.openRun(newRun("r9")))
              return { pipelines: st.pipelines, events: evs.length, refused: Exit.isFailure(write), runs: (yield* h.store.listRuns).length }
            }))).pipe(Effect.provide(NodeFileSystem.layer))
        assert.deepStrictEqual(yield* read(), { pipelines: 6, events: 7, refused: true, runs: 1 })
        assert.deepStrictEqual(yield* read("b"), { pipelines: 3, events: 3, refused: true, runs: 1 })
        assert.isTrue(yield* SuiteStore.isSuiteRoot(root))
        assert.isFalse(yield* SuiteStore.isSuiteRoot(nodePath.join(root, "manifest.json")))
      }))
  }

  it.effect("byExperiment: the feature level is the highest member's, for the writer and for read-only opens (merged and per member)", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* withSuite({ root, members: ["a", "b"], maxOpen: 1 }, ({ store }) =>
        Effect.gen(function*() {
          yield* store.openRun(newRun("run-1"))
          yield* store.admit([mpipe("b", "k0", { runId: rid("run-1") })])
          assert.strictEqual(store.featureLevel, "base")
          // a revisit in member a; then b is opened again, evicting a (maxOpen 1)
          yield* controlledToRewind(store, mpid("a", "c1"))
          assert.strictEqual(store.featureLevel, "visits-v1")
          yield* store.admit([mpipe("b", "k1", { runId: rid("run-1") })])
          assert.strictEqual(store.featureLevel, "visits-v1")
        }))
      const levelOf = (experiment?: string) =>
        Effect.scoped(Effect.map(SuiteStore.makeRead(root, { experiment }), (h) => h.store.featureLevel)).pipe(Effect.provide(NodeFileSystem.layer))
      assert.deepStrictEqual([yield* levelOf(), yield* levelOf("a"), yield* levelOf("b")], ["visits-v1", "visits-v1", "base"])
    }))

  it.effect("more members than maxOpen: at most maxOpen member databases are open; eviction flushes buffered facts and loses nothing", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      const members = Array.from({ length: 11 }, (_, i) => `m${String(i).padStart(2, "0")}`)
      const locks = () =>
        fs.readdirSync(nodePath.join(root, "experiments")).filter((m) => fs.existsSync(nodePath.join(root, "experiments", m, "state.db.lock"))).length
      let peak = 0
      yield* withSuite({ root, members, maxOpen: 3, flushIntervalMs: 3_600_000, batchSize: 100_000 }, ({ store }) =>
        Effect.gen(function*() {
          yield* store.openRun(newRun("r1"))
          for (let round = 0; round < 3; round++) {
            for (const m of members) {
              const id = mpid(m, `k${round}`)
              yield* store.admit([mpipe(m, `k${round}`)])
              // buffered (write-behind) until a flush: the eviction must write them
              yield* store.emitEvent(event("note", id, 1000 + round, "r1"))
              yield* store.recordAttempt({ ...attemptOf(id), runId: rid("r1") })
              peak = Math.max(peak, locks())
            }
          }
          assert.isAtMost(peak, 3)
          yield* store.finishRun(rid("r1"), { status: "completed", endedAt: 9000 })
        }))
      let events = 0, attempts = 0, pipelines = 0
      for (const m of members) {
        const f = nodePath.join(root, "experiments", m, "state.db")
        events += Number(rows(f, "SELECT count(*) AS n FROM events")[0]!.n)
        attempts += Number(rows(f, "SELECT count(*) AS n FROM attempts")[0]!.n)
        pipelines += Number(rows(f, "SELECT count(*) AS n FROM pipelines")[0]!.n)
      }
      assert.deepStrictEqual({ events, attempts, pipelines }, { events: 33, attempts: 33, pipelines: 33 })
    }))

  for (const layout of ["combined", "byExperiment"] as const satisfies ReadonlyArray<SuiteLayout>) {
    it.effect(`${layout}: a transition's pipeline.handoff event (read from its ledger row, schema 17) is in the merged view's events, counts, limits and stream, in (ts, id) order`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        const members = ["a", "b"]
        yield* withSuite({ root, layout, members }, ({ catalog, store }) =>
          Effect.gen(function*() {
            yield* store.openRun(newRun("r1"))
            const encoder = new TextEncoder()
            let ts = 1000
            for (const m of members) {
              for (let i = 0; i < 3; i++) {
                const p = mpipe(m, `h${i}`, { runId: rid("r1") })
                const id = p.pipelineId as string
                const s0 = Traversal.initial(id, 3)
                yield* store.admit([p], [{ ...artifact(id, -1, encoder.encode("seed")), runId: rid("r1") }], [{ pipelineId: p.pipelineId, state: s0 }])
                const s1 = Traversal.succeed(s0, 0, `${id}:0`, 3)
                yield* store.checkpoint({
                  pipelineId: p.pipelineId,
                  artifact: { ...artifact(id, 0, encoder.encode("a0")), runId: rid("r1") },
                  task: { ...task(id, 0), runId: rid("r1") },
                  traversal: { expectedVersion: s0.version, state: s1 },
                  events: [event("before", id, ts++, "r1")]
                })
                const s2 = Either.getOrThrow(Traversal.transition(s1, {
                  operation: "rewind", fromSeq: 1, toSeq: 0, entry: `${id}:3`, payload: true, nTasks: 3, limit: 5
                }))
                yield* store.checkpoint({
                  pipelineId: p.pipelineId,
                  task: { ...task(id, 1, "handed_off"), runId: rid("r1") },
                  events: [event("with", id, ts++, "r1")],
                  traversal: {
                    expectedVersion: s1.version,
                    state: s2,
                    handoff: ledgerRow(id, "rewind", 1, 0, `${id}:3`, "r1", ts++),
                    handoffEvent: { visit: 0, handoffs: 1, limit: 5 },
                    entry: { ...artifact(id, 3, encoder.encode("feedback")), runId: rid("r1"), taskName: "t1" },
                    invalidateFrom: 0
                  }
                })
                yield* store.emitEvent(event("after", id, ts++, "r1"))
              }
            }
            yield* store.flush
            const view = yield* catalog.view()
            const all = yield* view.events()
            const handoffs = all.filter((e) => e.kind === "pipeline.handoff")
            assert.strictEqual(handoffs.length, 6)
            assert.deepStrictEqual(handoffs[0]!.data, {
              operation: "rewind", fromSeq: 1, fromTask: "t1", visit: 0, toSeq: 0, toTask: "t0",
              entry: `${handoffs[0]!.pipelineId}:3`, entryReused: false, reason: "test", handoffs: 1, limit: 5
            })
            assert.deepStrictEqual(Object.keys(handoffs[0]!.data as object), [
              "operation", "fromSeq", "fromTask", "visit", "toSeq", "toTask", "entry", "entryReused", "reason", "handoffs", "limit"
            ])
            // every event once, in time order: before, with, the transition's, after, per pipeline
            assert.deepStrictEqual(all.map((e) => e.ts), Array.from({ length: 24 }, (_, i) => 1000 + i))
            assert.deepStrictEqual(all.slice(0, 4).map((e) => e.kind), ["before", "with", "pipeline.handoff", "after"])
            const key = (e: EventRecord) => `${e.ts}|${e.kind}|${e.pipelineId}|${JSON.stringify(e.data)}`
            for (const f of [{}, { runId: rid("r1") }, { kind: "pipeline.handoff" }, { kind: "with" }, { pipelineId: mpid("b", "h1") }]) {
              const naive = all.filter((e) =>
                (f.runId === undefined || e.runId === f.runId) && (f.kind === undefined || e.kind === f.kind) &&
                (f.pipelineId === undefined || e.pipelineId === f.pipelineId)
              )
              assert.strictEqual(yield* view.countEvents(f), naive.length)
              for (const limit of [1, 3, 100]) {
                assert.deepStrictEqual((yield* view.events({ ...f, limit })).map(key), naive.slice(Math.max(0, naive.length - limit)).map(key))
              }
              assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(view.streamEvents(f))).map(key), naive.map(key))
            }
            // nothing of it is a row of `events`
            const files = layout === "combined"
              ? fs.readdirSync(root).filter((f) => f.endsWith("state.db")).map((f) => nodePath.join(root, f))
              : members.map((m) => nodePath.join(root, "experiments", m, "state.db"))
            let stored = 0
            for (const f of files) stored += Number(rows(f, "SELECT count(*) AS n FROM events WHERE kind = 'pipeline.handoff'")[0]!.n)
            assert.strictEqual(stored, 0)
          }))
      }))
  }

  for (const layout of ["combined", "byExperiment"] as const satisfies ReadonlyArray<SuiteLayout>) {
    it.effect(`${layout}: limited queries merged across databases equal the naive merge (events by (ts, id), tasks, errors, pages, counts)`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        const members = ["a", "b", "c", "d"]
        yield* withSuite({ root, layout, members, maxOpen: 2 }, ({ catalog, store }) =>
          Effect.gen(function*() {
            yield* store.openRun(newRun("r1"))
            let seed = 7
            const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n
            for (const m of members) {
              const ps = Array.from({ length: 12 }, (_, i) =>
                mpipe(m, `k${i}`, { createdAt: 1000 + rnd(5), state: rnd(3) === 0 ? "failed" : "succeeded", updatedAt: 2000 + rnd(50) }))
              yield* store.admit(ps)
              for (const p of ps) {
                for (let s = 0; s < 2; s++) yield* store.putTask({ ...task(p.pipelineId, s), runId: rid("r1") })
                for (let k = 0; k < 4; k++) {
                  yield* store.emitEvent(event(k % 2 === 0 ? "even" : "odd", p.pipelineId, 1000 + rnd(40), k === 3 ? "r2" : "r1"))
                }
                // leases on shared pools, some retried after a decision to retry, some rate-limited
                const retried = rnd(3) === 0
                yield* store.recordAttempt({
                  ...attemptOf(p.pipelineId),
                  leaseIds: [`llm/k${rnd(3)}#${rnd(1000)}`, `llm/k0#${rnd(1000)}`],
                  errorClass: retried ? "rate_limit" : null,
                  decision: retried ? { retry: true, reason: "rate_limit", delayMs: 1 } : null
                })
                if (retried) yield* store.recordAttempt({ ...attemptOf(p.pipelineId), attemptNo: 2, leaseIds: [`llm/k${rnd(3)}#${rnd(1000)}`] })
              }
            }
            for (let k = 0; k < 6; k++) yield* store.emitEvent(event("pool", null, 1000 + rnd(40), "r1"))
            yield* store.flush

            const view = yield* catalog.view()
            const allEvents = yield* view.events()
            const key = (e: EventRecord) => `${e.ts}|${e.kind}|${e.pipelineId}|${e.runId}`
            for (const f of [{}, { runId: rid("r1") }, { kind: "odd" }, { pipelineId: mpid("c", "k3") }]) {
              const naive = allEvents.filter((e) =>
                (f.runId === undefined || e.runId === f.runId) && (f.kind === undefined || e.kind === f.kind) &&
                (f.pipelineId === undefined || e.pipelineId === f.pipelineId)
              )
              assert.strictEqual(yield* view.countEvents(f), naive.length)
              for (const limit of [1, 7, 30, 1000]) {
                const got = yield* view.events({ ...f, limit })
                assert.deepStrictEqual(got.map(key), naive.slice(Math.max(0, naive.length - limit)).map(key))
                assert.deepStrictEqual(got.map((e) => e.ts), [...got.map((e) => e.ts)].sort((x, y) => x - y))
              }
            }
            const allTasks = Chunk.toArray(yield* Stream.runCollect(view.streamTasks()))
              .sort((x, y) => (x.pipelineId < y.pipelineId ? -1 : x.pipelineId > y.pipelineId ? 1 : x.seq - y.seq))
            assert.strictEqual(allTasks.length, 96)
            for (const limit of [1, 5, 50]) {
              const got = Chunk.toArray(yield* Stream.runCollect(view.streamTasks({ limit })))
              assert.deepStrictEqual(got.map((t) => t.taskRunId), allTasks.slice(0, limit).map((t) => t.taskRunId))
            }
            const allPipes = Chunk.toArray(yield* Stream.runCollect(view.streamPipelines()))
            assert.strictEqual(allPipes.length, 48)
            const failed = allPipes.filter((p) => p.state === "failed")
              .sort((x, y) => y.updatedAt - x.updatedAt || (x.pipelineId < y.pipelineId ? -1 : 1))
            assert.deepStrictEqual((yield* view.errors({ limit: 5 })).map((e) => e.pipelineId), failed.slice(0, 5).map((p) => p.pipelineId))
            const ordered = [...allPipes].sort((x, y) => x.createdAt - y.createdAt || (x.pipelineId < y.pipelineId ? -1 : 1))
            assert.deepStrictEqual(allPipes.map((p) => p.pipelineId), ordered.map((p) => p.pipelineId))
            let after: { createdAt: number; pipelineId: PipelineId } | undefined
            const paged: Array<string> = []
            for (;;) {
              const page = yield* view.pipelinesPage({ limit: 7, after })
              paged.push(...page.pipelines.map((p) => p.pipelineId))
              if (page.next === null) break
              after = page.next
            }
            assert.deepStrictEqual(paged, ordered.map((p) => p.pipelineId))
            const st = yield* view.stats()
            assert.deepStrictEqual([st.pipelines, st.tasks, st.events], [48, 96, 48 * 4 + 6])
            // per-resource usage: the attempts of the view folded one by one, per run and for all
            const naiveUsage = (v: TaskStore, runId?: RunId) =>
              Effect.map(Stream.runCollect(v.streamAttempts({ runId })), (as) => {
                const acc = usageAccumulator()
                for (const a of as) acc.add(a)
                return acc.result()
              })
            assert.isAbove((yield* view.resourceUsage()).length, 1)
            assert.deepStrictEqual(yield* view.resourceUsage(), yield* naiveUsage(view))
            assert.deepStrictEqual(yield* view.resourceUsage(rid("r1")), yield* naiveUsage(view, rid("r1")))
            assert.strictEqual(st.byState.failed, failed.length)
            // one member of the view
            const b = yield* catalog.view("b")
            const bEvents = allEvents.filter((e) => e.pipelineId !== null && e.pipelineId.startsWith(`${memberDigest(SUITE, "b")}-`))
            assert.deepStrictEqual((yield* b.events({ limit: 9 })).map(key), bEvents.slice(bEvents.length - 9).map(key))
            assert.strictEqual((yield* b.stats()).pipelines, 12)
            assert.strictEqual((yield* b.pipelinesBySpec)[0]?.pipelines, 12)
            assert.deepStrictEqual(yield* b.resourceUsage(), yield* naiveUsage(b))
          }))
      }))
  }

  it.effect("byExperiment: unlimited merged streams come in one order across members (tasks by pipeline id, events by time, attempts by end time); a limit is a prefix", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      const members = ["a", "b", "c"]
      yield* withSuite({ root, members, maxOpen: 2 }, ({ catalog, store }) =>
        Effect.gen(function*() {
          yield* store.openRun(newRun("r1"))
          // written member by member (a, then b, then c), timestamps interleaved across members
          for (const [i, m] of members.entries()) {
            const ps = Array.from({ length: 4 }, (_, k) => mpipe(m, `k${k}`, { runId: rid("r1") }))
            yield* store.admit(ps)
            for (const [k, p] of ps.entries()) {
              yield* store.putTask({ ...task(p.pipelineId, 0), runId: rid("r1") })
              const t = 1000 + 10 * k + i
              yield* store.emitEvent(event("e", p.pipelineId, t, "r1"))
              yield* store.recordAttempt({ ...attemptOf(p.pipelineId), runId: rid("r1"), endedAt: t })
            }
          }
          yield* store.emitEvent(event("pool", null, 1005, "r1"))
          // a task row of a pipeline never admitted is read too (in its place by pipeline id)
          yield* store.putTask({ ...task(mpid("b", "ghost"), 0), runId: rid("r1") })
          const view = yield* catalog.view()
          const tasks = Chunk.toArray(yield* Stream.runCollect(view.streamTasks()))
          assert.strictEqual(tasks.length, 13)
          assert.include(tasks.map((t) => t.pipelineId), mpid("b", "ghost"))
          assert.deepStrictEqual(tasks.map((t) => t.pipelineId), tasks.map((t) => t.pipelineId).sort())
          const events = Chunk.toArray(yield* Stream.runCollect(view.streamEvents()))
          assert.deepStrictEqual(events.map((e) => e.ts), [1000, 1001, 1002, 1005, 1010, 1011, 1012, 1020, 1021, 1022, 1030, 1031, 1032])
          assert.deepStrictEqual(events.map((e) => [e.ts, e.pipelineId]), (yield* view.events()).map((e) => [e.ts, e.pipelineId]))
          const attempts = Chunk.toArray(yield* Stream.runCollect(view.streamAttempts()))
          assert.deepStrictEqual(attempts.map((a) => a.endedAt), [1000, 1001, 1002, 1010, 1011, 1012, 1020, 1021, 1022, 1030, 1031, 1032])
          for (const limit of [1, 5, 12]) {
            assert.deepStrictEqual(
              Chunk.toArray(yield* Stream.runCollect(view.streamTasks({ limit, runId: rid("r1") }))).map((t) => t.taskRunId),
              tasks.slice(0, limit).map((t) => t.taskRunId)
            )
            assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(view.streamEvents({ limit }))).map((e) => e.ts), events.slice(0, limit).map((e) => e.ts))
            assert.deepStrictEqual(
              Chunk.toArray(yield* Stream.runCollect(view.streamAttempts({ limit }))).map((a) => a.endedAt),
              attempts.slice(0, limit).map((a) => a.endedAt)
            )
          }
        }))
    }))

  // A stream that held a member's connection while the consumer wrote to another member could
  // wait forever with maxOpen 1 (the write waits for the held member to become idle): the test
  // would hang until the test timeout.
  it.effect("byExperiment with maxOpen 1: a consumer of a merged or per-pipeline stream can write to another member while reading", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* withSuite({ root, members: ["a", "b"], maxOpen: 1 }, ({ store }) =>
        Effect.gen(function*() {
          yield* store.openRun(newRun("r1"))
          const a = Array.from({ length: 3 }, (_, k) => mpipe("a", `k${k}`, { runId: rid("r1") }))
          yield* store.admit(a)
          for (const p of a) {
            yield* store.putTask({ ...task(p.pipelineId, 0), runId: rid("r1") })
            yield* store.putArtifact({ ...artifact(p.pipelineId, 0, new TextEncoder().encode("1")), runId: rid("r1") })
            yield* store.emitEvent(event("e", p.pipelineId, 1000, "r1"))
            yield* store.recordAttempt({ ...attemptOf(p.pipelineId), runId: rid("r1") })
          }
          yield* store.flush
          let n = 0
          /** Writes one pipeline of member b per row read (member a's rows: b is not open). */
          const writeB = () => store.admit([mpipe("b", `w${n++}`, { runId: rid("r1") })])
          const a0 = a[0]!.pipelineId
          const streams: ReadonlyArray<Stream.Stream<unknown, unknown>> = [
            store.streamTasks(),
            store.streamAttempts(),
            store.streamEvents({ kind: "e" }),
            store.streamTasks({ pipelineId: a0 }),
            store.streamAttempts({ pipelineId: a0 }),
            store.streamArtifacts({ pipelineId: a0 })
          ]
          const counts: Array<number> = []
          for (const s of streams) counts.push(Chunk.size(yield* Stream.runCollect(Stream.tap(s, writeB))))
          assert.deepStrictEqual(counts, [3, 3, 3, 1, 1, 1])
          assert.strictEqual((yield* store.stats()).pipelines, 3 + n)
        }))
    }))

  for (const layout of ["combined", "byExperiment"] as const) {
    it.effect(`${layout}: an accepted row change supersedes the old pipelines (out of the cumulative view, in the run's), recorded in the catalog; a restored row counts again`, () =>
      Effect.gen(function*() {
        const root = tempRoot()
        yield* withSuite({ root, layout }, ({ catalog, store }) =>
          Effect.gen(function*() {
            yield* runOver(store, "r1", ["a", "b"])
            const n = yield* catalog.acceptChangedRows!({ experimentId: "a", staleKeys: ["k1"], newKeys: ["k9"], revivedKeys: [], nowMs: 5000 })
            assert.strictEqual(n, 1)
            assert.deepStrictEqual(yield* catalog.superseded!("a"), [{ pipelineId: mpid("a", "k1"), experimentId: "a", localKey: "k1", supersededAt: 5000 }])
            assert.deepStrictEqual(yield* catalog.superseded!("b"), [])
            assert.strictEqual((yield* catalog.superseded!()).length, 1)
            assert.deepStrictEqual(yield* catalog.acceptances!, [{ experimentId: "a", acceptedAt: 5000, staleKeys: ["k1"], newKeys: ["k9"], pipelines: 1 }])
            const merged = yield* catalog.view()
            const member = yield* catalog.view("a")
            assert.strictEqual((yield* merged.stats()).pipelines, 3)
            assert.strictEqual((yield* merged.stats()).tasks, 3)
            assert.strictEqual((yield* member.stats()).pipelines, 1)
            assert.strictEqual((yield* member.stats()).byState.succeeded, 1)
            const listed = Chunk.toReadonlyArray(yield* Stream.runCollect(merged.streamPipelines())).map((p) => p.pipelineId)
            assert.notInclude(listed, mpid("a", "k1"))
            assert.strictEqual(listed.length, 3)
            assert.strictEqual((yield* member.pipelinesPage({ limit: 10 })).pipelines.length, 1)
            // the run's own view still shows what it did, and the pipeline stays readable
            assert.strictEqual((yield* merged.stats(rid("r1"))).pipelines, 4)
            assert.isTrue(Option.isSome(yield* merged.getPipeline(mpid("a", "k1"))))
            // the row restored: current again; the acceptance log keeps its record
            assert.strictEqual(yield* catalog.acceptChangedRows!({ experimentId: "a", staleKeys: [], newKeys: [], revivedKeys: ["k1"], nowMs: 6000 }), 0)
            assert.deepStrictEqual(yield* catalog.superseded!("a"), [])
            assert.strictEqual((yield* merged.stats()).pipelines, 4)
            assert.strictEqual((yield* catalog.acceptances!).length, 1)
          }))
        // read-only: the same picture, and no write
        yield* Effect.scoped(Effect.gen(function*() {
          const h = yield* SuiteStore.makeRead(root)
          assert.strictEqual((yield* (yield* h.catalog.view()).stats()).pipelines, 4)
          const refused = yield* Effect.exit(h.catalog.acceptChangedRows!({ experimentId: "a", staleKeys: ["k0"], newKeys: [], revivedKeys: [], nowMs: 7000 }))
          assert.isTrue(Exit.isFailure(refused))
        })).pipe(Effect.provide(NodeFileSystem.layer))
      }))
  }
})

const attemptOf = (pipelineId: PipelineId) => ({
  pipelineId,
  runId: rid("r1"),
  taskRunId: `${pipelineId}/0`,
  taskName: "t0",
  seq: 0,
  attemptNo: 1,
  outcome: "succeeded" as const,
  errorClass: null,
  errorType: null,
  errorMessage: null,
  decision: null,
  leaseIds: [],
  startedAt: 1000,
  endedAt: 1001,
  durationMs: 1
})


/**
 * The store contract's harness over a fresh suite root of `layout` with `members`: the root's
 * `Store` over the contract's backend; a write failure is injected into every store file of the
 * root that exists (`files`, relative to the root).
 */
const suiteHarness = (layout: SuiteLayout, members: ReadonlyArray<string>, files: ReadonlyArray<string>) => (): StoreHarness => {
  const root = tempRoot()
  return {
    layer: (options = {}, backend = ArtifactBackends.layerInline) =>
      Layer.project(
        SuiteStore.layer({
          ...options,
          root,
          suiteId: CONTRACT_SUITE,
          layout,
          members,
          artifactBackend: "contract-backend",
          artifactBackendLayer: Layer.orDie(backend)
        }),
        Store,
        Store,
        (s) => s
      ).pipe(Layer.provide(NodeFileSystem.layer)),
    injectWriteFailure: (on) =>
      Effect.sync(() => {
        for (const f of files) if (fs.existsSync(nodePath.join(root, f))) setWriteFailure(nodePath.join(root, f), on)
      })
  }
}

const CONTRACT_SUITE = "contract"
const CONTRACT_MEMBERS = ["m0", "m1"]

// The store contract over a combined suite root (an ordinary SQLite store with the catalog tables).
storeContract("SuiteStore (combined)", suiteHarness("combined", [], ["state.db"]))

// The store contract over a byExperiment suite root: the contract's pipelines spread over two
// members (by the last character of their names), so every read is the merged view of two
// member databases and the catalog, and every write is routed.
/** A contract name as a member pipeline id: member digest, then the name's bytes in hex (at most 16). */
const contractPipelineId = (name: string): PipelineId => {
  if (memberDigestOf(name) !== undefined) return name as PipelineId
  const hex = Buffer.from(name, "utf8").toString("hex")
  if (hex.length > 32) throw new Error(`contract pipeline name too long for a member id: ${name}`)
  const member = CONTRACT_MEMBERS[name.length === 0 ? 0 : name.charCodeAt(name.length - 1) % 2]!
  return `${memberDigest(CONTRACT_SUITE, member)}-${hex.padEnd(32, "0")}` as PipelineId
}
storeContract(
  "SuiteStore (byExperiment)",
  suiteHarness("byExperiment", CONTRACT_MEMBERS, ["suite.db", ...CONTRACT_MEMBERS.map((m) => `experiments/${m}/state.db`)]),
  // the router answers pipelineStates from getPipelines (pipelineStatesOf's fallback)
  { pipelineId: contractPipelineId, pipelineStates: false, takenPipelines: false }
)
