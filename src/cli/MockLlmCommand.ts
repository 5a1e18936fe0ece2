/**
 * `assay mock-llm`: runs the deterministic OpenAI-compatible mock server (see
 * `src/services/MockLlm.ts` and `docs/mock-llm.md`) until a stop signal.
 *
 * Once listening it prints exactly one JSON line on stdout,
 * `{"event":"listening","url":…,"host":…,"port":…,"pid":…,"seed":…,"endpoints":[{"name","model","baseUrl"}],"models":[…]}`,
 * so that a parent process can read the port; on SIGINT, SIGTERM or SIGHUP it drops every connection,
 * closes the socket and exits 0. It serves the built-in model profiles (`small`, `medium`,
 * `large`; any other model name keeps the default behaviour) unless `--models FILE` (alias
 * `--profiles`; JSON, YAML or TOML) declares its own.
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Flags from "./Flags.js"
import * as FileSystem from "@effect/platform/FileSystem"
import { Console, Effect, Either, Option, Queue, Schema } from "effect"
import { ConfigError } from "../domain/Errors.js"
import { formatOf, parseText } from "../config/internal/parse.js"
import * as Signals from "../services/Signals.js"
import { isLoopback } from "../services/internal/statsServer.js"
import {
  builtinModels,
  decodeModelCatalog,
  decodeProfile,
  EndpointProfile,
  LatencyProfile,
  type ModelCatalog,
  MockProfile,
  parseRpsSchedule,
  presetEndpoints,
  readProfileFile,
  serve
} from "../services/MockLlm.js"

const port = Flags.port(0, "TCP port to listen on; 0 picks a free port (printed on stdout).")
const host = Flags.host("Address to bind; only loopback addresses unless --allow-remote.")
const allowRemote = Flags.allowRemote("Allow binding a non-loopback address (the mock has no real authentication).")
const profile = Options.file("profile", { exists: "either" }).pipe(
  Options.optional,
  Options.withDescription("JSON profile file (seed and endpoints); see docs/mock-llm.md.")
)
const models = Options.file("models", { exists: "either" }).pipe(
  Options.withAlias("profiles"),
  Options.optional,
  Options.withDescription(
    "Model profiles (JSON, YAML or TOML: models with accuracy, latency, price, rate limit), selected by a request's model; default: the built-in small, medium, large. See docs/mock-llm.md."
  )
)
const seed = Options.integer("seed").pipe(
  Options.optional,
  Options.withDescription("Seed of every random draw (overrides the profile's seed; default 0).")
)
const endpoints = Options.integer("endpoints").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.between(1, 64, { message: () => "--endpoints must be between 1 and 64" }))),
  Options.optional,
  Options.withDescription("Without --profile: how many preset endpoints (fast, steady, limited, …; default 3).")
)
const log = Options.file("log").pipe(
  Options.optional,
  Options.withDescription("Append every answered request as a JSON line to this file.")
)
const rps = Options.float("rps").pipe(
  Options.optional,
  Options.withDescription("Override: per-key requests per second on every endpoint.")
)
const burst = Options.integer("burst").pipe(
  Options.optional,
  Options.withDescription("Override: per-key token bucket size on every endpoint (not with --rate-limit-headers, whose bucket is a minute of requests).")
)
const latencyMs = Options.float("latency-ms").pipe(
  Options.optional,
  Options.withDescription("Override: median latency (ms) on every endpoint (p95 = 2 × median).")
)
const errorRate = Options.float("error-rate").pipe(
  Options.optional,
  Options.withDescription("Override: probability of a 500/503 answer on every endpoint.")
)
const maxConcurrency = Options.integer("max-concurrency").pipe(
  Options.optional,
  Options.withDescription("Override: concurrent requests per endpoint beyond which it answers 429.")
)

const rpsSchedule = Options.text("rps-schedule").pipe(
  Options.optional,
  Options.withDescription(
    "Override: per-key limit changing over time on every endpoint, RPS@TIME,... (e.g. 10@0s,25@30s: 10 requests/s from the start, 25 from second 30)."
  )
)
const rateLimitHeaders = Options.choice("rate-limit-headers", ["none", "openai", "anthropic"] as const).pipe(
  Options.optional,
  Options.withDescription(
    "Override: a per-minute limit per key (a bucket of rps × 60 requests), sent as x-ratelimit-{limit,remaining,reset}-requests (openai) or anthropic-ratelimit-requests-* (anthropic) on every answer."
  )
)

const rateLimitSignal = Options.choice("rate-limit-signal", ["retry-after", "retry-after-ms", "none"] as const).pipe(
  Options.optional,
  Options.withDescription(
    "Override: how a key's spent bucket answers 429 on every endpoint: Retry-After in whole seconds (retry-after, default), retry-after-ms only (retry-after-ms), or a bare 429 (none)."
  )
)

const noStorms = Options.boolean("no-storms").pipe(
  Options.withDescription("Override: drop every endpoint's error storms (time windows of 5xx/429 answers).")
)

const randomAnswers = Options.boolean("random-answers").pipe(
  Options.withDescription("Override: every endpoint answers with a fresh random token (random-<hex>), never the same twice.")
)

interface Overrides {
  readonly seed: Option.Option<number>
  readonly rps: Option.Option<number>
  readonly burst: Option.Option<number>
  readonly latencyMs: Option.Option<number>
  readonly errorRate: Option.Option<number>
  readonly maxConcurrency: Option.Option<number>
  readonly randomAnswers?: boolean | undefined
  readonly noStorms?: boolean | undefined
  /** `RPS@TIME,...`: the first step's rate becomes `rps`, the schedule is the whole list. */
  readonly rpsSchedule?: Option.Option<string> | undefined
  readonly rateLimitHeaders?: Option.Option<"none" | "openai" | "anthropic"> | undefined
  readonly rateLimitSignal?: Option.Option<"retry-after" | "retry-after-ms" | "none"> | undefined
}

/**
 * Applies the command-line overrides to a profile and re-validates the result (so an
 * `--error-rate 2` is reported like a bad profile field). Fails with a {@link ConfigError}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const applyOverrides = (p: MockProfile, o: Overrides): Effect.Effect<MockProfile, ConfigError> => {
  const headers = o.rateLimitHeaders !== undefined && Option.isSome(o.rateLimitHeaders) ? o.rateLimitHeaders.value : "none"
  if (headers !== "none" && Option.isSome(o.burst)) {
    // the headers count down a minute of requests (the bucket is `rps × 60`): a small burst
    // would make the limit they name a lie (issue 18 trial, F1)
    const message = `does not apply with --rate-limit-headers ${headers}: the key's bucket is then a minute of requests (rps × 60), as the headers announce it`
    return Effect.fail(new ConfigError({ message: `--burst: ${message}`, issues: [{ path: "--burst", message, suggestion: "leave out --burst" }] }))
  }
  let schedule: ReadonlyArray<{ readonly atS: number; readonly rps: number }> | undefined
  if (o.rpsSchedule !== undefined && Option.isSome(o.rpsSchedule)) {
    const parsed = parseRpsSchedule(o.rpsSchedule.value)
    if (Either.isLeft(parsed)) {
      return Effect.fail(
        new ConfigError({
          message: `--rps-schedule: ${parsed.left}`,
          issues: [{ path: "--rps-schedule", message: parsed.left, suggestion: "10@0s,25@30s" }]
        })
      )
    }
    schedule = parsed.right.map((st) => ({ atS: st.atS, rps: st.rps }))
  }
  const eps = p.endpoints.map((e) => {
    const out: Record<string, unknown> = Schema.encodeSync(EndpointProfile)(e)
    if (Option.isSome(o.rps)) out["rps"] = o.rps.value
    if (Option.isSome(o.burst)) out["burst"] = o.burst.value
    if (Option.isSome(o.latencyMs)) {
      out["latency"] = { ...Schema.encodeSync(LatencyProfile)(e.latency), medianMs: o.latencyMs.value, p95Ms: 2 * o.latencyMs.value }
    }
    if (Option.isSome(o.errorRate)) out["errorRate"] = o.errorRate.value
    if (Option.isSome(o.maxConcurrency)) out["maxConcurrency"] = o.maxConcurrency.value
    if (schedule !== undefined) {
      // before the first step (a schedule starting later than 0 s): unlimited, as written
      if (schedule[0]!.atS === 0) out["rps"] = schedule[0]!.rps
      else delete out["rps"]
      out["rpsSchedule"] = schedule
    }
    if (o.rateLimitHeaders !== undefined && Option.isSome(o.rateLimitHeaders)) out["rateLimitHeaders"] = o.rateLimitHeaders.value
    if (o.rateLimitSignal !== undefined && Option.isSome(o.rateLimitSignal)) out["rateLimitSignal"] = o.rateLimitSignal.value
    if (o.noStorms === true) out["storms"] = []
    if (o.randomAnswers === true) out["answers"] = { ...(out["answers"] as object | undefined), random: true }
    return out
  })
  return decodeProfile({ seed: Option.getOrElse(o.seed, () => p.seed), endpoints: eps })
}

/**
 * Reads a model-profiles file (`--models FILE`): JSON, YAML or TOML by its suffix, decoded as a
 * {@link ModelCatalog}. Fails with a {@link ConfigError} (exit 2) for an unknown suffix, an
 * unreadable file, a syntax error (with line and column) or schema problems, each with its
 * field path (e.g. `models[1].pricing.promptPer1k`) and the file name in the message.
 *
 * @since 0.1.0
 * @category constructors
 */
export const readModelsFile = (file: string): Effect.Effect<ModelCatalog, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const format = formatOf(file)
    if (format !== "json" && format !== "yaml" && format !== "toml") {
      return yield* new ConfigError({
        message: `mock-llm model profiles ${file}: unknown format; use .json, .yaml/.yml or .toml`,
        issues: [{ path: "", message: "unknown format", suggestion: "use .json, .yaml/.yml or .toml" }]
      })
    }
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(file).pipe(
      Effect.mapError((e) => new ConfigError({ message: `cannot read mock-llm model profiles ${file}: ${e.message}` }))
    )
    const parsed = parseText(text, format, file)
    if (Either.isLeft(parsed)) return yield* parsed.left
    return yield* decodeModelCatalog(parsed.right).pipe(
      Effect.mapError((e) => new ConfigError({ message: `${file}: ${e.message}`, issues: e.issues }))
    )
  })

/**
 * The `mock-llm` subcommand.
 *
 * @since 0.1.0
 * @category commands
 */
export const mockLlm = Command.make(
  "mock-llm",
  { port, host, allowRemote, profile, models, seed, endpoints, log, rps, burst, latencyMs, errorRate, maxConcurrency, randomAnswers, noStorms, rpsSchedule, rateLimitHeaders, rateLimitSignal },
  (args) =>
    Effect.gen(function*() {
      if (!args.allowRemote && !isLoopback(args.host)) {
        return yield* new ConfigError({
          message: `refusing to bind non-loopback host ${args.host}; pass --allow-remote to do it anyway`,
          issues: [{ path: "host", message: "not a loopback address", suggestion: "127.0.0.1" }]
        })
      }
      if (Option.isSome(args.profile) && Option.isSome(args.endpoints)) {
        return yield* new ConfigError({
          message: "--endpoints chooses preset endpoints and cannot be combined with --profile",
          issues: [{ path: "endpoints", message: "not allowed with --profile" }]
        })
      }
      // a missing file: `error: … no such file` (exit 2), as every path of every command (newuser37 F10)
      if (Option.isSome(args.profile)) yield* Flags.requireExisting(args.profile.value, "mock-llm profile", "--profile")
      if (Option.isSome(args.models)) yield* Flags.requireExisting(args.models.value, "mock-llm model profiles", "--models")
      const base = Option.isSome(args.profile)
        ? yield* readProfileFile(args.profile.value)
        : MockProfile.make({
          endpoints: presetEndpoints(Option.getOrElse(args.endpoints, () => 3)) as unknown as readonly [
            EndpointProfile,
            ...Array<EndpointProfile>
          ]
        })
      const finalProfile = yield* applyOverrides(base, args)
      const catalog = Option.isSome(args.models) ? yield* readModelsFile(args.models.value) : builtinModels
      // The server runs until a stop signal, which is its normal end: the scope closes
      // (dropping every connection, hung ones included) and the command succeeds (exit 0).
      yield* Effect.scoped(
        Effect.gen(function*() {
          // claimed before the address is printed: a parent may signal as soon as it reads it
          const stops = yield* Effect.flatMap(Signals.Signals, (signals) => signals.claim)
          const server = yield* serve({
            profile: finalProfile,
            models: catalog,
            host: args.host,
            port: args.port,
            logFile: Option.getOrUndefined(args.log)
          })
          yield* Console.log(JSON.stringify({
            event: "listening",
            url: server.url,
            host: server.host,
            port: server.port,
            pid: process.pid,
            seed: finalProfile.seed,
            endpoints: server.endpoints,
            models: server.models
          }))
          yield* Queue.take(stops)
        })
      )
    })
).pipe(Command.withDescription("Run a deterministic OpenAI-compatible mock LLM server on loopback (for tests and demos)."))
