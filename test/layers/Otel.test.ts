/**
 * The OpenTelemetry export (`layers/Otel.ts`): settings from the standard environment variables
 * (off unless asked for; endpoint, headers and service name; bad values refused naming the
 * variable, secrets never echoed), and spans really exported as OTLP/HTTP JSON to a receiver
 * on 127.0.0.1 that keeps them in memory (no network).
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Layer, Option, Redacted } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Otel from "../../src/layers/Otel.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { otlpReceiver } from "../support/otlpReceiver.js"

const withEnv = (env: Record<string, string>) => Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

describe("Otel.settingsFromEnv", () => {
  it.effect("off unless --otel or OTEL_TRACES_EXPORTER=otlp; OTEL_SDK_DISABLED wins", () =>
    Effect.gen(function*() {
      assert.isTrue(Option.isNone(yield* Otel.settingsFromEnv(false).pipe(withEnv({}))))
      assert.isTrue(
        Option.isNone(yield* Otel.settingsFromEnv(false).pipe(withEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://h:4318" }))),
        "an endpoint alone does not switch export on"
      )
      const flagged = yield* Otel.settingsFromEnv(true).pipe(withEnv({}))
      assert.strictEqual(Option.getOrThrow(flagged).url, "http://localhost:4318/v1/traces")
      assert.strictEqual(Option.getOrThrow(flagged).serviceName, "assay")
      const byEnv = yield* Otel.settingsFromEnv(false).pipe(withEnv({ OTEL_TRACES_EXPORTER: "console, otlp" }))
      assert.isTrue(Option.isSome(byEnv))
      assert.isTrue(Option.isNone(yield* Otel.settingsFromEnv(true).pipe(withEnv({ OTEL_SDK_DISABLED: "TRUE" }))))
    }))

  it.effect("endpoint: the traces endpoint as is, else the base endpoint + /v1/traces; service name", () =>
    Effect.gen(function*() {
      const base = yield* Otel.settingsFromEnv(true).pipe(
        withEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "https://collector.example:4318/", OTEL_SERVICE_NAME: "qa-evals" })
      )
      assert.strictEqual(Option.getOrThrow(base).url, "https://collector.example:4318/v1/traces")
      assert.strictEqual(Option.getOrThrow(base).serviceName, "qa-evals")
      const traces = yield* Otel.settingsFromEnv(true).pipe(
        withEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:1", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://b:2/custom" })
      )
      assert.strictEqual(Option.getOrThrow(traces).url, "http://b:2/custom")
    }))

  it.effect("headers are parsed, URL-decoded and redacted; malformed values are refused naming the variable", () =>
    Effect.gen(function*() {
      const ok = yield* Otel.settingsFromEnv(true).pipe(
        withEnv({ OTEL_EXPORTER_OTLP_HEADERS: "authorization=Bearer%20s3cret, x-team = qa" })
      )
      const headers = Option.getOrThrow(ok).headers
      assert.deepStrictEqual(Redacted.value(headers), { authorization: "Bearer s3cret", "x-team": "qa" })
      assert.notInclude(String(headers), "s3cret")
      const bad = yield* Effect.either(
        Otel.settingsFromEnv(true).pipe(withEnv({ OTEL_EXPORTER_OTLP_HEADERS: "authorization:s3cret" }))
      )
      assert.isTrue(Either.isLeft(bad))
      if (Either.isLeft(bad)) {
        assert.strictEqual(bad.left.issues[0]!.path, "OTEL_EXPORTER_OTLP_HEADERS")
        assert.notInclude(bad.left.message, "s3cret")
      }
      const url = yield* Effect.either(Otel.settingsFromEnv(true).pipe(withEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "nope" })))
      assert.isTrue(Either.isLeft(url) && url.left.issues[0]!.path === "OTEL_EXPORTER_OTLP_ENDPOINT")
      const scheme = yield* Effect.either(
        Otel.settingsFromEnv(true).pipe(withEnv({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "ftp://x/v1/traces" }))
      )
      assert.isTrue(Either.isLeft(scheme) && scheme.left.message.includes("http:// or https://"))
    }))
})

describe("Otel.layer", () => {
  it.live("exports a run's spans (OTLP/HTTP JSON) with the service name and headers; the last batch on scope close", () =>
    Effect.scoped(Effect.gen(function*() {
      const receiver = yield* otlpReceiver
      const settings: Otel.OtelSettings = {
        url: `${receiver.baseUrl}/v1/traces`,
        serviceName: "assay-test",
        headers: Redacted.make({ authorization: "Bearer t0ken" }),
        // longer than the test: only the scope's end sends the batch
        exportInterval: "1 hour"
      }
      const template = Pipeline.make("traced", Task.sync("inc", (n: number) => n + 1))
      const report = yield* Runner.run(template.map([1, 2, 3])).pipe(
        Effect.tap((r) => Effect.annotateCurrentSpan("assay.run.id", r.runId)),
        Effect.withSpan("assay.run"),
        Effect.provide(Layer.mergeAll(
          Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))),
          Otel.layer(settings, "0.1.0")
        ))
      )
      assert.strictEqual(report.status, "completed")
      const run = receiver.spans.find((s) => s.name === "assay.run")
      assert.isDefined(run, `spans received: ${receiver.spans.map((s) => s.name).join(", ")}`)
      assert.strictEqual(run!.attributes["assay.run.id"], report.runId)
      assert.strictEqual(run!.serviceName, "assay-test")
      assert.strictEqual(receiver.headers[0]!["authorization"], "Bearer t0ken")
    })))
})
