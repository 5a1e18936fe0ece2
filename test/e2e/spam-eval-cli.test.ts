/**
 * The spam evaluation end to end, through the CLI as a user runs it: a real sample of the
 * SpamAssassin corpus, `assay mock-llm` as a child process (429 bursts, an error storm, 5xx),
 * `bin/assay run -c examples/spam-eval/experiment.yaml`, signals, `assay resume`, `assay export`.
 *
 * (a) with 429 bursts and an error storm every email ends with exactly one result;
 * (b) SIGINT mid-run exits 130 with rows `interrupted`, `resume` completes, and the mock's request
 *     log shows no prompt sent again for a pipeline whose classify checkpoint was committed;
 * (c) the same after SIGKILL (past a 2 s stale threshold set through the config's run section);
 * (d) the predictions and the accuracy after interruptions equal those of the uninterrupted run.
 * Throughout: the API key (given through the environment) never appears in the store file, the
 * exported results, the mock's log or any process output.
 *
 * Each spawn costs ~1.5 s of start-up; the whole file runs in about a minute.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { buildPrompt, corpusDirectory, parseEmail } from "../../examples/spam-eval/corpus.js"
import { writeSample } from "../../examples/spam-eval/sample.js"
import { canonicalJsonUnsafe, digest } from "../../src/domain/Json.js"

const root = fileURLToPath(new URL("../../", import.meta.url))
const bin = path.join(root, "bin/assay")
const config = path.join(root, "examples/spam-eval/experiment.yaml")
const SAMPLE = 300
const apiKey = `sk-e2e-${randomBytes(12).toString("hex")}`

// 429 bursts (a small per-key bucket, a 429 storm with Retry-After), a 503 error storm,
// background 5xx and noisy answer wording; no unlabelled answers, so every prediction is the
// scorer's deterministic label and runs can be compared email by email.
const profile = {
  seed: 7,
  endpoints: [
    {
      name: "fast",
      latency: { medianMs: 90, p95Ms: 200 },
      errorRate: 0.1,
      storms: [{ fromS: 3, toS: 6, status: 503, rate: 0.8 }],
      answers: { noiseRate: 0.3, invalidRate: 0 }
    },
    { name: "steady", latency: { medianMs: 150, p95Ms: 300 }, maxConcurrency: 3 },
    {
      name: "limited",
      rps: 4,
      burst: 2,
      latency: { medianMs: 40 },
      storms: [{ fromS: 3, toS: 7, status: 429, rate: 0.7, retryAfterS: 1 }]
    }
  ]
}

interface Result {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

interface Started {
  readonly child: ChildProcess
  readonly done: Promise<Result>
}

const outputs: Array<string> = []

const start = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Started => {
  const child = spawn(bin, [...args], {
    cwd: root,
    env: { ...process.env, SPAM_EVAL_API_KEY: apiKey, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stdout = ""
  let stderr = ""
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()))
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()))
  const done = new Promise<Result>((resolve) =>
    child.on("close", (code, signal) => {
      outputs.push(stdout, stderr)
      resolve({ code, signal, stdout, stderr })
    })
  )
  return { child, done }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const query = <A = Record<string, unknown>>(db: string, sql: string): Array<A> => {
  const d = new Database(db, { readonly: true, fileMustExist: true })
  try {
    return d.prepare(sql).all() as Array<A>
  } finally {
    d.close()
  }
}

const count = (db: string, sql: string): number => {
  try {
    return Number(Object.values(query(db, sql)[0]!)[0])
  } catch {
    return 0 // the store is being created
  }
}

const waitFor = async (check: () => boolean, what: string, timeoutMs = 60_000) => {
  const t0 = Date.now()
  while (!check()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

interface LogEntry {
  readonly seq: number
  readonly status: number | null
  readonly fingerprint: string | null
  readonly keyHash: string | null
}

const readLog = (file: string): Array<LogEntry> =>
  fs.existsSync(file)
    ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as LogEntry)
    : []

/** A running `assay mock-llm` with the test profile, killed (SIGTERM) when the scope closes. */
const mockServer = (dir: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const profileFile = path.join(dir, "profile.json")
      fs.writeFileSync(profileFile, JSON.stringify(profile))
      const log = path.join(dir, "requests.jsonl")
      const s = start(["mock-llm", "--port", "0", "--profile", profileFile, "--log", log])
      const line = await new Promise<string>((resolve, reject) => {
        let buf = ""
        s.child.stdout!.on("data", (d: Buffer) => {
          buf += d.toString()
          const nl = buf.indexOf("\n")
          if (nl >= 0) resolve(buf.slice(0, nl))
        })
        s.child.on("close", () => reject(new Error("mock-llm exited before listening")))
      })
      const url = (JSON.parse(line) as { url: string }).url
      const env = {
        SPAM_EVAL_FAST_URL: `${url}/e/fast/v1`,
        SPAM_EVAL_STEADY_URL: `${url}/e/steady/v1`,
        SPAM_EVAL_LIMITED_URL: `${url}/e/limited/v1`
      }
      return { server: s, log, env }
    }),
    ({ server }) =>
      Effect.promise(async () => {
        server.child.kill("SIGTERM")
        await server.done
      })
  )

interface Job {
  readonly dir: string
  readonly store: string
  readonly env: Record<string, string>
}

const jobOf = (dir: string, samplePath: string, mockEnv: Record<string, string>): Job => ({
  dir,
  store: path.join(dir, "state.db"),
  env: { ...mockEnv, SPAM_EVAL_SAMPLE_FILE: samplePath, SPAM_EVAL_STALE_AFTER: "2 seconds" }
})

const runArgs = (job: Job, command: "run" | "resume") => [command, "-c", config, "--store", job.store]

interface ResultRow {
  readonly key: string
  readonly state: string
  readonly payload: { readonly gold: string; readonly predicted: string; readonly correct: boolean } | null
}

/** Exports the results with the CLI and reads them back. */
const exportResults = async (job: Job): Promise<Array<ResultRow>> => {
  const out = path.join(job.dir, "results.jsonl")
  const r = await start(["export", job.store, out, "--rows", "results", "--format", "jsonl"]).done
  assert.strictEqual(r.code, 0, r.stderr)
  const text = fs.readFileSync(out, "utf8")
  assert.notInclude(text, apiKey)
  return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as ResultRow)
}

const accuracyOf = (rows: ReadonlyArray<ResultRow>) => {
  const scored = rows.filter((r) => r.payload !== null)
  return scored.filter((r) => r.payload!.correct).length / scored.length
}

/** Exactly one result per sampled email, every one scored. */
const assertOneResultEach = (rows: ReadonlyArray<ResultRow>, ids: ReadonlyArray<string>) => {
  assert.strictEqual(rows.length, ids.length)
  assert.deepStrictEqual(rows.map((r) => r.key).sort(), [...ids].sort())
  for (const r of rows) {
    assert.strictEqual(r.state, "succeeded", JSON.stringify(r))
    assert.isNotNull(r.payload)
  }
}

const assertNoKeyInStore = (store: string) => {
  for (const f of [store, `${store}-wal`]) {
    if (fs.existsSync(f)) assert.isFalse(fs.readFileSync(f).includes(apiKey), `the API key is in ${f}`)
  }
}

/** The ids of the pipelines whose classify checkpoint (seq 2) is committed. */
const committedClassify = (store: string): Set<string> =>
  new Set(query<{ pipeline_id: string }>(store, "SELECT DISTINCT pipeline_id FROM artifacts WHERE seq = 2").map((r) => r.pipeline_id))

/**
 * No prompt of a pipeline committed before `cut` (the number of log lines at that moment) was
 * sent again after it. Fingerprints shared with an email that was not committed (duplicate
 * emails in the corpus) are left out.
 */
const assertNoRepeatAfter = (
  log: string,
  cut: number,
  committed: ReadonlySet<string>,
  fingerprints: ReadonlyMap<string, string>
) => {
  const uncommitted = new Set([...fingerprints].filter(([id]) => !committed.has(id)).map(([, fp]) => fp))
  const guarded = new Set([...committed].map((id) => fingerprints.get(id)!).filter((fp) => !uncommitted.has(fp)))
  assert.isAbove(guarded.size, 0)
  const entries = readLog(log)
  const before = new Set(entries.slice(0, cut).filter((e) => e.status === 200).map((e) => e.fingerprint))
  for (const fp of guarded) assert.isTrue(before.has(fp), "a committed prompt was answered before the cut")
  const after = entries.slice(cut)
  assert.isAbove(after.length, 0, "the resume sent requests")
  const repeated = after.filter((e) => e.fingerprint !== null && guarded.has(e.fingerprint))
  assert.deepStrictEqual(repeated, [], "a committed classify request was sent again")
}

describe("spam-eval through the CLI on the real corpus", () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), "assay-spam-e2e-"))
  const samplePath = path.join(base, "sample.jsonl")
  let ids: ReadonlyArray<string> = []
  const fingerprints = new Map<string, string>() // email id → request fingerprint
  let reference: ReadonlyArray<ResultRow> = []
  const resumed: Array<ReadonlyArray<ResultRow>> = []

  it.live("prepare: a stratified sample and its prompts' fingerprints", () =>
    Effect.gen(function*() {
      const s = yield* writeSample({ size: SAMPLE, seed: 5, out: samplePath })
      assert.strictEqual(s.emails, SAMPLE)
      assert.isAbove(s.spam, 0)
      const dataDir = yield* corpusDirectory
      const seeds = fs.readFileSync(samplePath, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { id: string; file: string })
      ids = seeds.map((x) => x.id)
      for (const seed of seeds) {
        const parsed = yield* parseEmail(fs.readFileSync(path.join(dataDir, seed.file), "utf8"))
        fingerprints.set(seed.id, digest(canonicalJsonUnsafe([{ role: "user", content: buildPrompt(parsed) }])))
      }
    }).pipe(Effect.provide(NodeContext.layer)), 60_000)

  it.scopedLive("(a) with 429 bursts and an error storm every email ends with exactly one result", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(base, "a-"))
      const mock = yield* mockServer(dir)
      const job = jobOf(dir, samplePath, mock.env)
      const r = yield* Effect.promise(() => start(runArgs(job, "run"), job.env).done)
      assert.strictEqual(r.code, 0, r.stderr)
      assert.include(r.stdout, `pipelines: ${SAMPLE} (succeeded ${SAMPLE})`)
      const rows = yield* Effect.promise(() => exportResults(job))
      assertOneResultEach(rows, ids)
      // the storms really happened and were absorbed by retries
      const log = readLog(mock.log)
      assert.isAbove(log.filter((e) => e.status === 429).length, 0)
      assert.isAbove(log.filter((e) => e.status !== null && e.status >= 500).length, 0)
      // the fingerprints computed here are the mock's: every email's prompt, and only those, answered 200
      const answered = log.filter((e) => e.status === 200).map((e) => e.fingerprint)
      assert.deepStrictEqual(new Set(answered), new Set(fingerprints.values()))
      assert.isAbove(count(job.store, "SELECT COUNT(*) FROM attempts WHERE error_class = 'rate_limit'"), 0)
      assert.isAbove(count(job.store, "SELECT COUNT(*) FROM attempts WHERE error_class = 'upstream'"), 0)
      // live metrics: the run's accuracy metric equals the exported results' accuracy
      const metric = query<{ value: string }>(job.store, "SELECT value FROM metrics WHERE scope = '' AND name = 'accuracy'")
      assert.strictEqual(metric.length, 1)
      assert.closeTo(Number(JSON.parse(metric[0]!.value)), accuracyOf(rows), 1e-12)
      // ... and the end of `run` shows it as the headline, with where the results are
      assert.include(r.stdout, `accuracy ${(accuracyOf(rows) * 100).toFixed(1)}%`)
      assert.match(r.stdout, /^metrics: .*accuracy/m)
      assert.include(r.stdout, "results: assay report ")
      assertNoKeyInStore(job.store)
      reference = rows
    }), 120_000)

  it.scopedLive("(b) SIGINT mid-run exits 130 with rows interrupted; resume completes without repeating committed requests", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(base, "b-"))
      const mock = yield* mockServer(dir)
      const job = jobOf(dir, samplePath, mock.env)
      const first = start(runArgs(job, "run"), job.env)
      yield* Effect.promise(() =>
        waitFor(() => count(job.store, "SELECT COUNT(*) FROM pipelines WHERE state = 'succeeded'") >= 60, "60 emails scored")
      )
      first.child.kill("SIGINT")
      const r = yield* Effect.promise(() => first.done)
      assert.strictEqual(r.code, 130, r.stderr)
      const states = Object.fromEntries(
        query<{ state: string; n: number }>(job.store, "SELECT state, COUNT(*) AS n FROM pipelines GROUP BY state").map((x) => [x.state, x.n])
      )
      assert.isAbove(states["interrupted"] ?? 0, 0, JSON.stringify(states))
      assert.isBelow(states["succeeded"] ?? 0, SAMPLE)
      assert.strictEqual(states["running"] ?? 0, 0)
      const committed = committedClassify(job.store)
      const cut = readLog(mock.log).length
      const again = yield* Effect.promise(() => start(runArgs(job, "resume"), job.env).done)
      assert.strictEqual(again.code, 0, again.stderr)
      assertNoRepeatAfter(mock.log, cut, committed, fingerprints)
      const rows = yield* Effect.promise(() => exportResults(job))
      assertOneResultEach(rows, ids)
      assertNoKeyInStore(job.store)
      resumed.push(rows)
    }), 120_000)

  it.scopedLive("(c) SIGKILL mid-run, then resume past the stale threshold, without repeating committed requests", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(base, "c-"))
      const mock = yield* mockServer(dir)
      const job = jobOf(dir, samplePath, mock.env)
      const first = start(runArgs(job, "run"), job.env)
      yield* Effect.promise(() =>
        waitFor(() => count(job.store, "SELECT COUNT(*) FROM pipelines WHERE state = 'succeeded'") >= 60, "60 emails scored")
      )
      first.child.kill("SIGKILL")
      const r = yield* Effect.promise(() => first.done)
      assert.strictEqual(r.signal, "SIGKILL")
      assert.isAbove(count(job.store, "SELECT COUNT(*) FROM pipelines WHERE state = 'running'"), 0)
      const committed = committedClassify(job.store)
      const cut = readLog(mock.log).length
      yield* Effect.promise(() => sleep(2_500)) // past run.staleAfter (2 s, from SPAM_EVAL_STALE_AFTER)
      const again = yield* Effect.promise(() => start(runArgs(job, "resume"), job.env).done)
      assert.strictEqual(again.code, 0, again.stderr)
      assert.isAbove(count(job.store, "SELECT COUNT(*) FROM events WHERE kind = 'run.stale_interrupted'"), 0)
      assertNoRepeatAfter(mock.log, cut, committed, fingerprints)
      const rows = yield* Effect.promise(() => exportResults(job))
      assertOneResultEach(rows, ids)
      assertNoKeyInStore(job.store)
      resumed.push(rows)
    }), 120_000)

  it.live("(d) after interruptions the predictions and the accuracy equal the uninterrupted run's; the key never showed", () =>
    Effect.sync(() => {
      assert.strictEqual(reference.length, SAMPLE)
      assert.strictEqual(resumed.length, 2)
      const predictions = (rows: ReadonlyArray<ResultRow>) =>
        Object.fromEntries(rows.map((r) => [r.key, r.payload?.predicted ?? null]))
      const acc = accuracyOf(reference)
      assert.isAbove(acc, 0.7) // meaningful, and imperfect:
      assert.isBelow(acc, 1)
      for (const rows of resumed) {
        assert.deepStrictEqual(predictions(rows), predictions(reference))
        assert.strictEqual(accuracyOf(rows), acc)
      }
      for (const o of outputs) assert.notInclude(o, apiKey)
      fs.rmSync(base, { recursive: true, force: true })
    }))
})
