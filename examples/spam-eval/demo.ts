/**
 * `npm run demo`: the spam evaluation end to end, as a user would run it by hand.
 *
 * 1. starts `assay mock-llm` on a free port (a child process; its one JSON line on stdout gives
 *    the endpoints' base URLs) with its three preset endpoints: `fast` (fast but flaky, with an
 *    error storm from 20 s to 25 s), `steady` (slow but steady), `limited` (5 requests/s per key);
 * 2. writes a stratified, seeded sample of the SpamAssassin corpus to
 *    `runs/spam-eval/sample.jsonl` (see `sample.ts`);
 * 3. runs `bin/assay run -c examples/spam-eval/experiment.yaml` with the endpoints and a demo key
 *    in the environment, showing its progress display, into a fresh store
 *    `runs/spam-eval/state.db` (an earlier demo store is removed first);
 * 4. exports the results with `assay export … --rows results` to `runs/spam-eval/results.jsonl`;
 * 5. prints the report: accuracy, precision, recall and F1 (from the exported results) and the
 *    attempts, retries and 429s of each endpoint (from `assay report --json`);
 * 6. stops the mock server (also on failure or Ctrl-C: the child is released with the scope).
 *
 * Flags: `--sample N` (default 1,000), `--seed N` (default 0), `--concurrency N` (default: the
 * config's 16). The mock's request log is kept at `runs/spam-eval/mock-requests.jsonl`.
 *
 * @since 0.1.0
 */
import * as Cli from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Command from "@effect/platform/Command"
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Console, Data, Duration, Effect, Option, Schema, Stream } from "effect"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { addScore, emptyConfusion, metricsOf } from "./pipeline.js"
import { writeSample } from "./sample.js"

const root = NodePath.resolve(NodePath.dirname(fileURLToPath(import.meta.url)), "../..")
const bin = NodePath.join(root, "bin/assay")
const config = NodePath.join(root, "examples/spam-eval/experiment.yaml")
const outDir = NodePath.join(root, "runs/spam-eval")
const storePath = NodePath.join(outDir, "state.db")
const resultsPath = NodePath.join(outDir, "results.jsonl")
const samplePath = NodePath.join(outDir, "sample.jsonl")
const mockLogPath = NodePath.join(outDir, "mock-requests.jsonl")

/**
 * A step of the demo failed: `step` names it (`mock-llm`, `run`, `export`, `report`),
 * `message` says what happened.
 *
 * @since 0.1.0
 * @category errors
 */
export class DemoError extends Data.TaggedError("DemoError")<{ readonly step: string; readonly message: string }> {
  override get message(): string {
    return `${this.step}: ${this.message}`
  }
}

const Listening = Schema.parseJson(Schema.Struct({
  event: Schema.Literal("listening"),
  url: Schema.String,
  endpoints: Schema.Array(Schema.Struct({ name: Schema.String, model: Schema.String, baseUrl: Schema.String }))
}))

const ReportJson = Schema.parseJson(Schema.Struct({
  runs: Schema.Array(Schema.Struct({ runId: Schema.String, status: Schema.String, startedAt: Schema.Number, endedAt: Schema.NullOr(Schema.Number) })),
  byState: Schema.Record({ key: Schema.String, value: Schema.Number }),
  resources: Schema.Array(Schema.Struct({
    pool: Schema.String,
    resourceId: Schema.String,
    attempts: Schema.Number,
    retries: Schema.Number,
    rateLimited: Schema.Number
  }))
}))

const ResultLine = Schema.parseJson(Schema.Struct({
  key: Schema.NullOr(Schema.String),
  state: Schema.String,
  payload: Schema.NullOr(Schema.Struct({ gold: Schema.Literal("spam", "ham"), predicted: Schema.Literal("spam", "ham") })),
  errorClass: Schema.NullOr(Schema.String)
}))

/** Starts `assay mock-llm` in the current scope (SIGTERM to its group when the scope closes). */
const startMock = Effect.gen(function*() {
  const proc = yield* Command.make(bin, "mock-llm", "--port", "0", "--log", mockLogPath).pipe(
    Command.workingDirectory(root),
    Command.stderr("inherit"),
    Command.start
  )
  const first = yield* proc.stdout.pipe(
    Stream.decodeText(),
    Stream.splitLines,
    Stream.take(1),
    Stream.runHead,
    Effect.timeoutFail({
      duration: Duration.seconds(60),
      onTimeout: () => new DemoError({ step: "mock-llm", message: "no listening line within 60 s" })
    })
  )
  if (Option.isNone(first)) return yield* new DemoError({ step: "mock-llm", message: "exited before listening" })
  return yield* Schema.decode(Listening)(first.value).pipe(
    Effect.mapError(() => new DemoError({ step: "mock-llm", message: `unexpected first line: ${first.value}` }))
  )
})

/** Runs `bin/assay ...args` with the terminal attached; returns its exit code. */
const assay = (args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  Command.make(bin, ...args).pipe(
    Command.workingDirectory(root),
    Command.env(env),
    Command.stdin("inherit"),
    Command.stdout("inherit"),
    Command.stderr("inherit"),
    Command.exitCode
  )

const removeStore = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  for (const f of [storePath, `${storePath}-wal`, `${storePath}-shm`, resultsPath, mockLogPath]) {
    yield* fs.remove(f, { force: true })
  }
})

const pct = (x: number) => `${(x * 100).toFixed(1)}%`

/**
 * The demo (see the module header). Fails with a {@link DemoError} naming the step, the
 * corpus' `CorpusError` or a `PlatformError`.
 *
 * @since 0.1.0
 * @category program
 */
export const demo = (options: { readonly sample: number; readonly seed: number; readonly concurrency: Option.Option<number> }) =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    yield* fs.makeDirectory(outDir, { recursive: true })
    yield* removeStore
    const sample = yield* writeSample({ size: options.sample, seed: options.seed, out: samplePath })
    yield* Console.log(`spam-eval demo: ${sample.emails} emails of the SpamAssassin corpus (${sample.spam} spam, ${sample.ham} ham), seed ${options.seed}`)
    const mock = yield* startMock
    const url = (name: string) => mock.endpoints.find((e) => e.name === name)?.baseUrl ?? `${mock.url}/e/${name}/v1`
    yield* Console.log(`mock-llm listening on ${mock.url} (endpoints ${mock.endpoints.map((e) => e.name).join(", ")})`)
    yield* Console.log(`$ bin/assay run -c examples/spam-eval/experiment.yaml --store runs/spam-eval/state.db`)
    const code = yield* assay(
      [
        "run",
        "-c",
        config,
        "--store",
        storePath,
        ...Option.match(options.concurrency, { onNone: () => [], onSome: (n) => ["--concurrency", String(n)] })
      ],
      {
        SPAM_EVAL_FAST_URL: url("fast"),
        SPAM_EVAL_STEADY_URL: url("steady"),
        SPAM_EVAL_LIMITED_URL: url("limited"),
        SPAM_EVAL_SAMPLE_FILE: samplePath,
        SPAM_EVAL_API_KEY: process.env["SPAM_EVAL_API_KEY"] ?? "demo-key"
      }
    )
    // 0: every email scored; 1: some answers named no label (recorded failures); else stop
    if (code !== 0 && code !== 1) {
      return yield* new DemoError({ step: "run", message: code === 130 ? "interrupted (resumable with bin/assay resume)" : `exit code ${code}` })
    }
    yield* Console.log(`$ bin/assay export runs/spam-eval/state.db runs/spam-eval/results.jsonl --rows results --format jsonl`)
    const exported = yield* assay(["export", storePath, resultsPath, "--rows", "results", "--format", "jsonl"])
    if (exported !== 0) return yield* new DemoError({ step: "export", message: `exit code ${exported}` })
    const reportText = yield* Command.make(bin, "report", storePath, "--json").pipe(Command.workingDirectory(root), Command.string)
    const report = yield* Schema.decode(ReportJson)(reportText).pipe(
      Effect.mapError(() => new DemoError({ step: "report", message: "unexpected output of assay report --json" }))
    )
    // accuracy figures from the exported results: one line per email
    let confusion = emptyConfusion
    const lines = (yield* fs.readFileString(resultsPath)).split("\n").filter((l) => l.trim() !== "")
    for (const l of lines) {
      const r = yield* Schema.decode(ResultLine)(l).pipe(
        Effect.mapError(() => new DemoError({ step: "export", message: `unexpected results line: ${l.slice(0, 200)}` }))
      )
      if (r.payload !== null) confusion = addScore(confusion, r.payload)
      else if (r.errorClass === "invalid") confusion = { ...confusion, invalid: confusion.invalid + 1 }
      else confusion = { ...confusion, failed: confusion.failed + 1 }
    }
    const m = metricsOf(confusion)
    const run = report.runs[0]
    const seconds = run !== undefined && run.endedAt !== null ? ((run.endedAt - run.startedAt) / 1000).toFixed(1) : "?"
    const out = [
      "",
      "=== spam-eval report ===",
      `run ${run?.runId ?? "?"}: ${run?.status ?? "?"} in ${seconds} s`,
      `emails ${lines.length}: evaluated ${m.evaluated}, answers with no label ${m.invalid}, other failures ${m.failed}`,
      `accuracy ${pct(m.accuracy)}   precision (spam) ${pct(m.precision)}   recall (spam) ${pct(m.recall)}   F1 ${m.f1.toFixed(3)}`,
      "endpoint   attempts  retries  429s",
      ...report.resources.filter((r) => r.pool === "llm").map((r) =>
        `${r.resourceId.padEnd(10)} ${String(r.attempts).padStart(8)} ${String(r.retries).padStart(8)} ${String(r.rateLimited).padStart(5)}`
      ),
      `store:   runs/spam-eval/state.db   (bin/assay report runs/spam-eval/state.db)`,
      `results: runs/spam-eval/results.jsonl`
    ]
    yield* Console.log(out.join("\n"))
    yield* Console.log("stopping mock-llm")
  }))

const sampleOption = Options.integer("sample").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.between(1, 6046))),
  Options.withDefault(1000),
  Options.withDescription("Number of emails (stratified, seeded sample of the 6,046).")
)
const seedOption = Options.integer("seed").pipe(Options.withDefault(0), Options.withDescription("Seed of the sample."))
const concurrencyOption = Options.integer("concurrency").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))),
  Options.optional,
  Options.withDescription("Pipelines run at once (default: the config's).")
)

const command = Cli.make(
  "demo",
  { sample: sampleOption, seed: seedOption, concurrency: concurrencyOption },
  (o) => demo(o)
)

if (process.argv[1] !== undefined && import.meta.url === `file://${NodePath.resolve(process.argv[1])}`) {
  Cli.run(command, { name: "spam-eval demo", version: "0.1.0" })(process.argv).pipe(
    Effect.provide(NodeContext.layer),
    NodeRuntime.runMain
  )
}
