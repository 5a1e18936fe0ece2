/**
 * `assay run --otel`: the run's span reaches an OpenTelemetry collector (here a receiver on
 * 127.0.0.1 that keeps the spans in memory), named `assay.run` with the run's id and status;
 * without `--otel` (or `OTEL_TRACES_EXPORTER=otlp`) nothing is sent; a malformed
 * `OTEL_EXPORTER_OTLP_HEADERS` exits 2 naming the variable, before anything runs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, root, tempDir } from "../support/cli.js"
import { otlpReceiver } from "../support/otlpReceiver.js"

const config = path.join(root, "examples/experiments/delay.json")

describe("assay run --otel", () => {
  it.live("exports the run's span to OTEL_EXPORTER_OTLP_ENDPOINT; nothing without --otel", () =>
    Effect.scoped(Effect.gen(function*() {
      const receiver = yield* otlpReceiver
      const dir = yield* tempDir("otel")
      const env = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.baseUrl, OTEL_SERVICE_NAME: "qa-otel" }
      const plain = yield* assay(["run", "-c", config, "--store", path.join(dir, "a.db"), "--quiet"], { env })
      assert.strictEqual(plain.code, 0, plain.stderr)
      assert.strictEqual(receiver.spans.length, 0, "no export unless asked for")

      const r = yield* assay(
        ["run", "-c", config, "--store", path.join(dir, "b.db"), "--quiet", "--otel", "--summary", "json"],
        { env }
      )
      assert.strictEqual(r.code, 0, r.stderr)
      const report = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runId: string }
      const run = receiver.spans.find((s) => s.name === "assay.run")
      assert.isDefined(run, `spans received: ${receiver.spans.map((s) => s.name).join(", ")}`)
      assert.strictEqual(run!.attributes["assay.run.id"], report.runId)
      assert.strictEqual(run!.attributes["assay.run.status"], "completed")
      assert.strictEqual(run!.serviceName, "qa-otel")
      // the CLI's span names the command; the runner's run span is its child
      const command = receiver.spans.find((s) => s.name === "assay.command")
      assert.isDefined(command)
      assert.strictEqual(command!.attributes["assay.command"], "run")
      assert.strictEqual(run!.parentSpanId, command!.spanId)
    })))

  it.live("OTEL_TRACES_EXPORTER=otlp switches export on; a malformed header list exits 2 naming the variable", () =>
    Effect.scoped(Effect.gen(function*() {
      const receiver = yield* otlpReceiver
      const dir = yield* tempDir("otel")
      const on = yield* assay(["run", "-c", config, "--store", path.join(dir, "c.db"), "--quiet"], {
        env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.baseUrl, OTEL_TRACES_EXPORTER: "otlp" }
      })
      assert.strictEqual(on.code, 0, on.stderr)
      assert.isTrue(receiver.spans.some((s) => s.name === "assay.run"))
      const bad = yield* assay(["run", "-c", config, "--store", path.join(dir, "d.db"), "--otel"], {
        env: { OTEL_EXPORTER_OTLP_HEADERS: "authorization:s3cret" }
      })
      assert.strictEqual(bad.code, 2, bad.stderr)
      assert.include(bad.stderr, "OTEL_EXPORTER_OTLP_HEADERS")
      assert.notInclude(bad.stderr, "s3cret")
    })))
})
