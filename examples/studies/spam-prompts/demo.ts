/**
 * `npm run demo:study`: the spam-prompts study end to end against `assay mock-llm`.
 *
 * 1. writes a stratified, seeded sample of the SpamAssassin corpus (`--emails N`, default 300,
 *    or the environment variable `SPAM_PROMPTS_EMAILS`) to `OUT/sample.jsonl`;
 * 2. starts `bin/assay mock-llm --port 0 --models examples/studies/spam-prompts/models.yaml`
 *    (or `--models FILE`, env `SPAM_PROMPTS_MODELS`: other model profiles; a child process on
 *    a free 127.0.0.1 port; its one JSON line on stdout gives the URL);
 * 3. runs `bin/assay study run examples/studies/spam-prompts/study.yaml --output-root OUT/root`
 *    with the mock's URL, a demo key and the sample in the environment (2 prompts × 3 models ×
 *    3 repeats);
 * 4. prints the COMPARE and CONCLUSION sections of `bin/assay study report` (the whole report
 *    is one command away, printed at the end);
 * 5. stops the mock server (also on failure or Ctrl-C: the child is released with the scope).
 *
 * `OUT` is `--out DIR` (default `runs/spam-prompts-demo` at the repository root); it is emptied
 * first, so every demo starts from nothing.
 *
 * @since 0.6.0
 */
import * as Cli from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Command from "@effect/platform/Command"
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Config, Console, Data, Duration, Effect, Option, Schema, Stream } from "effect"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { writeSample } from "../../spam-eval/sample.js"

const here = NodePath.dirname(fileURLToPath(import.meta.url))
const root = NodePath.resolve(here, "../../..")
const bin = NodePath.join(root, "bin/assay")
const studyFile = NodePath.join(here, "study.yaml")
const modelsFile = NodePath.join(here, "models.yaml")
const endpointFile = NodePath.join(here, "endpoint.json")

/**
 * A step of the demo failed: `step` names it (`mock-llm`, `study run`, `study report`),
 * `message` says what happened.
 *
 * @since 0.6.0
 * @category errors
 */
export class StudyDemoError extends Data.TaggedError("StudyDemoError")<{ readonly step: string; readonly message: string }> {
  override get message(): string {
    return `${this.step}: ${this.message}`
  }
}

const Listening = Schema.parseJson(Schema.Struct({ event: Schema.Literal("listening"), url: Schema.String }))

/** Starts `assay mock-llm` with the model profiles `models` in the current scope. */
const startMock = (logPath: string, models: string) =>
  Effect.gen(function*() {
    const proc = yield* Command.make(bin, "mock-llm", "--port", "0", "--models", models, "--profile", endpointFile, "--log", logPath).pipe(
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
        onTimeout: () => new StudyDemoError({ step: "mock-llm", message: "no listening line within 60 s" })
      })
    )
    if (Option.isNone(first)) return yield* new StudyDemoError({ step: "mock-llm", message: "exited before listening" })
    return yield* Schema.decode(Listening)(first.value).pipe(
      Effect.mapError(() => new StudyDemoError({ step: "mock-llm", message: `unexpected first line: ${first.value}` }))
    )
  })

/**
 * The demo (see the module header). `emails`: the sample size; `out`: the demo's folder;
 * `models`: the mock's model profiles (default `models.yaml` beside the study).
 * Fails with a {@link StudyDemoError} naming the step, the corpus' `CorpusError` or a
 * `PlatformError`.
 *
 * @since 0.6.0
 * @category program
 */
export const demo = (options: { readonly emails: number; readonly out: string; readonly models?: string }) =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const out = NodePath.resolve(options.out)
    yield* fs.remove(out, { recursive: true, force: true })
    yield* fs.makeDirectory(out, { recursive: true })
    const samplePath = NodePath.join(out, "sample.jsonl")
    const outputRoot = NodePath.join(out, "root")
    const sample = yield* writeSample({ size: options.emails, seed: 0, out: samplePath })
    yield* Console.log(`spam-prompts demo: ${sample.emails} emails of the SpamAssassin corpus (${sample.spam} spam, ${sample.ham} ham)`)
    const rel = (p: string) => p.startsWith(root + NodePath.sep) ? NodePath.relative(root, p) : p
    const models = NodePath.resolve(options.models ?? modelsFile)
    const mock = yield* startMock(NodePath.join(out, "mock-requests.jsonl"), models)
    yield* Console.log(`mock-llm listening on ${mock.url} (model profiles: ${rel(models)})`)
    yield* Console.log(`$ bin/assay study run ${rel(studyFile)} --output-root ${rel(outputRoot)}`)
    const env = {
      SPAM_PROMPTS_URL: `${mock.url}/v1`,
      SPAM_PROMPTS_API_KEY: "demo-key",
      SPAM_PROMPTS_SAMPLE: samplePath
    }
    const code = yield* Command.make(bin, "study", "run", studyFile, "--output-root", outputRoot).pipe(
      Command.workingDirectory(root),
      Command.env(env),
      Command.stdin("inherit"),
      Command.stdout("inherit"),
      Command.stderr("inherit"),
      Command.exitCode
    )
    if (code !== 0) return yield* new StudyDemoError({ step: "study run", message: `exit code ${code}` })
    const report = yield* Command.make(bin, "study", "report", studyFile, "--output-root", outputRoot).pipe(
      Command.workingDirectory(root),
      Command.env(env),
      Command.string
    )
    const lines = report.split("\n")
    const at = (h: string) => lines.indexOf(h)
    const compare = at("COMPARE"), evidence = at("EVIDENCE"), conclusion = at("CONCLUSION")
    if (compare < 0 || evidence < 0 || conclusion < 0) {
      return yield* new StudyDemoError({ step: "study report", message: `unexpected report:\n${report.slice(0, 2000)}` })
    }
    yield* Console.log(["", ...lines.slice(compare, evidence), ...lines.slice(conclusion)].join("\n"))
    yield* Console.log(`\nthe whole report: bin/assay study report ${rel(studyFile)} --output-root ${rel(outputRoot)}`)
    yield* Console.log("stopping mock-llm")
  }))

const emailsOption = Options.integer("emails").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.between(1, 6046))),
  Options.withFallbackConfig(Config.integer("SPAM_PROMPTS_EMAILS")),
  Options.withDefault(300),
  Options.withDescription("Number of emails (stratified, seeded sample of the 6,046; env SPAM_PROMPTS_EMAILS).")
)
const outOption = Options.text("out").pipe(
  Options.withDefault(NodePath.join(root, "runs/spam-prompts-demo")),
  Options.withDescription("The demo's folder (emptied first): sample, mock log and the study's output root.")
)

const modelsOption = Options.text("models").pipe(
  Options.withFallbackConfig(Config.string("SPAM_PROMPTS_MODELS")),
  Options.withDefault(modelsFile),
  Options.withDescription(
    "The mock's model profiles (default examples/studies/spam-prompts/models.yaml; env SPAM_PROMPTS_MODELS): the tests give a copy whose latencies are scaled down."
  )
)

const command = Cli.make("demo-study", { emails: emailsOption, out: outOption, models: modelsOption }, (o) => demo(o))

if (process.argv[1] !== undefined && import.meta.url === `file://${NodePath.resolve(process.argv[1])}`) {
  Cli.run(command, { name: "spam-prompts demo", version: "0.6.0" })(process.argv).pipe(
    Effect.provide(NodeContext.layer),
    NodeRuntime.runMain
  )
}
