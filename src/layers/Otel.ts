/**
 * Exporting assay's spans (a span per run, per attempt, per group-commit batch) to an
 * OpenTelemetry collector, switched on by the user: `assay run --otel` (or `resume`), or the
 * standard `OTEL_TRACES_EXPORTER=otlp`. Spans go as OTLP/HTTP JSON through
 * `@effect/opentelemetry`'s `OtlpTracer` (no OpenTelemetry SDK at run time), in batches, and
 * the last batch is sent when the layer's scope closes.
 *
 * Where they go and how they are labelled follows the OpenTelemetry environment variables
 * (https://opentelemetry.io/docs/specs/otel/protocol/exporter/ and
 * https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/):
 * - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the full URL; else `OTEL_EXPORTER_OTLP_ENDPOINT` with
 *   `/v1/traces` appended; else `http://localhost:4318/v1/traces`;
 * - `OTEL_EXPORTER_OTLP_HEADERS` (`OTEL_EXPORTER_OTLP_TRACES_HEADERS` first): `k=v,k2=v2`,
 *   values URL-encoded; kept `Redacted` (a token there is never printed);
 * - `OTEL_SERVICE_NAME`: the resource's `service.name` (default `assay`);
 * - `OTEL_SDK_DISABLED=true`: no export, even with `--otel`.
 *
 * @since 0.1.0
 */
import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { Config, Duration, Effect, Either, Layer, Option, Redacted } from "effect"
import { ConfigError } from "../domain/Errors.js"

/**
 * Where and how spans are exported.
 * - `url`: the OTLP/HTTP traces endpoint (`…/v1/traces`);
 * - `serviceName`: the resource's `service.name`;
 * - `headers`: extra request headers (authentication), redacted;
 * - `exportInterval`: how often a batch is sent (default 5 seconds).
 *
 * @since 0.1.0
 * @category models
 */
export interface OtelSettings {
  readonly url: string
  readonly serviceName: string
  readonly headers: Redacted.Redacted<Readonly<Record<string, string>>>
  readonly exportInterval?: Duration.DurationInput | undefined
}

/**
 * The OTLP/HTTP default traces endpoint (a collector on this machine).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultUrl = "http://localhost:4318/v1/traces"

const envError = (name: string, message: string) =>
  new ConfigError({ message: `${name}: ${message}`, issues: [{ path: name, message }] })

/**
 * Parses an `OTEL_EXPORTER_OTLP_HEADERS` value (`k=v,k2=v2`, values URL-encoded; blanks
 * around names and values dropped). Fails with `ConfigError` naming `name` on an entry without
 * `=` or with an empty key; the message never repeats a value.
 *
 * @param name the variable the text came from (for the error)
 * @param text the variable's value
 * @since 0.1.0
 * @category parsing
 */
export const parseHeaders = (name: string, text: string): Either.Either<Record<string, string>, ConfigError> => {
  const out: Record<string, string> = {}
  const entries = text.split(",").map((e) => e.trim()).filter((e) => e !== "")
  for (const [i, entry] of entries.entries()) {
    const eq = entry.indexOf("=")
    const key = eq < 0 ? "" : entry.slice(0, eq).trim()
    if (key === "") {
      return Either.left(envError(name, `entry ${i + 1} is not key=value (expected k=v,k2=v2)`))
    }
    let value = entry.slice(eq + 1).trim()
    try {
      value = decodeURIComponent(value)
    } catch {
      return Either.left(envError(name, `the value of ${key} is not URL-encoded text`))
    }
    out[key] = value
  }
  return Either.right(out)
}

const checkUrl = (name: string, url: string): Either.Either<string, ConfigError> => {
  try {
    const parsed = new URL(url)
    return parsed.protocol === "http:" || parsed.protocol === "https:"
      ? Either.right(url)
      : Either.left(envError(name, `an http:// or https:// URL is needed (got ${parsed.protocol})`))
  } catch {
    return Either.left(envError(name, `not a URL: ${JSON.stringify(url)}`))
  }
}

const optionalVar = (name: string) => Config.option(Config.string(name))

/**
 * The export settings, read from the OpenTelemetry environment variables (through Effect's
 * `Config`, so a test may provide its own `ConfigProvider`): `None` when export is off, that is
 * when neither `flag` (`--otel`) nor `OTEL_TRACES_EXPORTER` naming `otlp` asks for it, or
 * `OTEL_SDK_DISABLED` is `true`. Fails with `ConfigError` naming the variable (CLI exit 2) on a
 * malformed endpoint or header list.
 *
 * @param flag whether the user passed `--otel`
 * @since 0.1.0
 * @category config
 */
export const settingsFromEnv = (flag: boolean): Effect.Effect<Option.Option<OtelSettings>, ConfigError> =>
  Effect.gen(function*() {
    const read = Effect.orElseSucceed(
      Config.all({
        disabled: optionalVar("OTEL_SDK_DISABLED"),
        exporter: optionalVar("OTEL_TRACES_EXPORTER"),
        tracesEndpoint: optionalVar("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        endpoint: optionalVar("OTEL_EXPORTER_OTLP_ENDPOINT"),
        tracesHeaders: optionalVar("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
        headers: optionalVar("OTEL_EXPORTER_OTLP_HEADERS"),
        serviceName: optionalVar("OTEL_SERVICE_NAME")
      }),
      () => undefined
    )
    const env = yield* read
    if (env === undefined) return Option.none()
    if (Option.getOrElse(env.disabled, () => "").trim().toLowerCase() === "true") return Option.none()
    const exporters = Option.getOrElse(env.exporter, () => "").split(",").map((e) => e.trim().toLowerCase())
    if (!flag && !exporters.includes("otlp")) return Option.none()
    const url = Option.isSome(env.tracesEndpoint)
      ? yield* checkUrl("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", env.tracesEndpoint.value)
      : Option.isSome(env.endpoint)
      ? yield* checkUrl("OTEL_EXPORTER_OTLP_ENDPOINT", `${env.endpoint.value.replace(/\/+$/, "")}/v1/traces`)
      : defaultUrl
    const headers = Option.isSome(env.tracesHeaders)
      ? yield* parseHeaders("OTEL_EXPORTER_OTLP_TRACES_HEADERS", env.tracesHeaders.value)
      : Option.isSome(env.headers)
      ? yield* parseHeaders("OTEL_EXPORTER_OTLP_HEADERS", env.headers.value)
      : {}
    const serviceName = Option.getOrElse(
      Option.filter(Option.map(env.serviceName, (s) => s.trim()), (s) => s !== ""),
      () => "assay"
    )
    return Option.some({ url, serviceName, headers: Redacted.make(headers) })
  })

/**
 * The tracer that exports every span to `settings.url` (OTLP/HTTP JSON over `fetch`). Spans
 * are sent every `exportInterval` and when 1,000 are waiting; the scope's end sends the rest
 * (waiting at most 3 seconds for the collector). An unreachable collector loses spans but
 * never fails the program.
 *
 * @param settings where and how to export
 * @param serviceVersion the resource's `service.version`
 * @since 0.1.0
 * @category layers
 */
export const layer = (settings: OtelSettings, serviceVersion?: string): Layer.Layer<never> =>
  OtlpTracer.layer({
    url: settings.url,
    resource: { serviceName: settings.serviceName, serviceVersion },
    headers: Redacted.value(settings.headers),
    exportInterval: settings.exportInterval ?? Duration.seconds(5),
    shutdownTimeout: Duration.seconds(3)
  }).pipe(Layer.provide([OtlpSerialization.layerJson, FetchHttpClient.layer]))

/**
 * The export layer as the environment and `--otel` ask for it ({@link settingsFromEnv}): the
 * exporting tracer, or no layer at all when export is off. Fails with `ConfigError` on a
 * malformed variable.
 *
 * @param flag whether the user passed `--otel`
 * @param serviceVersion the resource's `service.version`
 * @since 0.1.0
 * @category layers
 */
export const layerFromEnv = (flag: boolean, serviceVersion?: string): Layer.Layer<never, ConfigError> =>
  Layer.unwrapEffect(
    Effect.map(
      settingsFromEnv(flag),
      Option.match({ onNone: () => Layer.empty, onSome: (settings) => layer(settings, serviceVersion) })
    )
  )
