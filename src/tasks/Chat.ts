/**
 * The built-in `chat` task: one OpenAI-compatible chat completion per attempt, through a
 * leased resource of a pool (default pool `"llm"`).
 *
 * **The endpoint comes from the resource.** A resource's `options` name its endpoint:
 * `baseUrl` (the OpenAI base URL, e.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is
 * appended), the key (`apiKey`, or `apiKeyEnv`: the name of an environment variable holding
 * it, so that config files never contain the key), a default `model` and extra `headers`.
 * {@link chatClientFactory} builds one {@link ChatClient} per resource (the pool calls it once,
 * lazily); the task calls `lease.client.complete(...)`.
 *
 * **Errors are classified at the adapter boundary** into a {@link ChatError} whose
 * `errorClass` drives retry and pool health: HTTP 429 → `rate_limit` with the server's
 * `Retry-After` in `retryAfterMs` (so the retry policy waits at least that long); 5xx →
 * `upstream`; 408/504 and a request deadline → `timeout`; refused/reset connections →
 * `connection`; a 2xx body that is not a chat completion → `invalid`; any other 4xx →
 * `fatal`. Latency (ms, from `Clock`) and token usage are reported to the lease
 * (`usage: { tokens, promptTokens, completionTokens }`); a failure is reported `ok: false` only
 * when it is the endpoint's fault (rate_limit, upstream, connection, timeout).
 *
 * **The key never leaves the client.** It is held as a `Redacted`, sent only in the
 * `Authorization` header, and every message a {@link ChatError} carries is passed through a
 * mask that replaces the key (and every secret-named header value) by `***`. No raw HTTP
 * error object (whose request carries the Authorization header) ever leaves this module.
 *
 * **Why @effect/platform's HttpClient and not `@effect/ai-openai` (0.41).** Checked against
 * the mock server: (1) its `LanguageModel` speaks the Responses API (`POST /responses`), which
 * OpenAI-compatible servers (vLLM, llama.cpp, Ollama, the mock) generally do not serve;
 * (2) its generated `createChatCompletion` decodes the answer with the full OpenAI schema,
 * which requires `choices[].message.refusal` and `choices[].logprobs`, fields compatible
 * servers omit, so every valid answer from them fails with a `ParseError`; (3) its raw
 * `HttpClientError`s keep the request, whose JSON form includes the `Authorization` header.
 * The status and `Retry-After` would be reachable, but (1)–(3) make it unfit; the request it
 * builds is four lines of `HttpClientRequest`, so this module builds it itself and decodes
 * the answer with a lenient Schema (`choices[0].message.content` and `usage` only).
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Clock, Config, Duration, Effect, Either, Layer, Option, Predicate, Redacted, Schema } from "effect"
import {
  ConfigError,
  type ConfigIssue,
  classify,
  classOfStatus,
  ErrorClass,
  isErrorClass,
  parseRetryAfter
} from "../domain/Errors.js"
import type { AcquireError, AlgorithmInput, Lease, ResourceInfo, Selector } from "../domain/Lease.js"
import { isSecretKey } from "../domain/Resource.js"
import type { ClientFactory } from "../domain/Resource.js"
import type { RetryPolicy, RetryPolicyInput } from "../domain/RetryPolicy.js"
import * as Task from "../domain/Task.js"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * A failed chat completion, classified. `errorClass` is read first by `classify`;
 * `retryAfterMs` (milliseconds) is the server's `Retry-After`, read by the retry policy;
 * `status` is the HTTP status when there was a response; `resourceId` the resource that
 * answered. `message` never contains the API key (it is masked as `***`).
 *
 * @since 0.1.0
 * @category errors
 */
export class ChatError extends Schema.TaggedError<ChatError>("assay/ChatError")("ChatError", {
  message: Schema.String,
  errorClass: ErrorClass,
  status: Schema.optional(Schema.Number),
  retryAfterMs: Schema.optional(Schema.Number),
  resourceId: Schema.optional(Schema.String)
}) {}

/**
 * The error classes that are the endpoint's fault: reported to the lease as `ok: false`
 * (they drive the resource's health). `invalid` and `fatal` are not: a prompt we built badly
 * or an answer we cannot read says nothing about the endpoint's health.
 *
 * @since 0.1.0
 * @category constants
 */
export const endpointFaultClasses: ReadonlySet<ErrorClass> = new Set<ErrorClass>([
  "rate_limit",
  "upstream",
  "connection",
  "timeout"
])

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * One chat message (`role`: `system`, `user`, `assistant`, …; `content`: text).
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatMessage {
  readonly role: string
  readonly content: string
}

/**
 * One completion request: the messages, and optionally the model (default: the endpoint's),
 * `temperature`, `maxTokens` (sent as `max_tokens`), a request deadline `timeoutMs`
 * (milliseconds; past it the call fails with class `timeout`) and extra body fields.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatRequest {
  readonly messages: ReadonlyArray<ChatMessage>
  readonly model?: string | undefined
  readonly temperature?: number | undefined
  readonly maxTokens?: number | undefined
  readonly timeoutMs?: number | undefined
  readonly extraBody?: Readonly<Record<string, unknown>> | undefined
}

/**
 * Token usage of one completion, as the server reported it (0 when it reported nothing;
 * `totalTokens` defaults to prompt + completion).
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatUsage {
  readonly promptTokens: number
  readonly completionTokens: number
  readonly totalTokens: number
}

/**
 * One successful completion: the text of the first choice, the model the server named,
 * its `finishReason`, the usage, and the latency in milliseconds (from `Clock`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatCompletion {
  readonly content: string
  readonly model: string
  readonly finishReason: string | null
  readonly usage: ChatUsage
  readonly latencyMs: number
}

/**
 * The client of one endpoint, built once per resource by {@link chatClientFactory}:
 * `complete` sends one request and fails only with a classified {@link ChatError}.
 * `baseUrl` and `model` are informative; the key is not exposed.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatClient {
  readonly _tag: "ChatClient"
  readonly resourceId: string
  readonly baseUrl: string
  readonly model: string | undefined
  readonly complete: (request: ChatRequest) => Effect.Effect<ChatCompletion, ChatError>
}

/**
 * An endpoint as read from a resource's options (see {@link endpointOf}).
 *
 * @since 0.1.0
 * @category models
 */
export interface Endpoint {
  readonly baseUrl: string
  readonly apiKey: Redacted.Redacted<string> | undefined
  readonly model: string | undefined
  readonly headers: Readonly<Record<string, string>>
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

/**
 * Replaces every occurrence of each secret (strings of 4+ characters) in `text` by `***`.
 *
 * @since 0.1.0
 * @category secrets
 */
export const maskText = (text: string, secrets: ReadonlyArray<string>): string => {
  let out = text
  for (const s of secrets) {
    if (s.length >= 4) out = out.split(s).join("***")
  }
  return out
}

const secretsOf = (endpoint: Endpoint): ReadonlyArray<string> => {
  const out: Array<string> = []
  if (endpoint.apiKey !== undefined) out.push(Redacted.value(endpoint.apiKey))
  for (const [k, v] of Object.entries(endpoint.headers)) if (isSecretKey(k)) out.push(v)
  return out
}

// ---------------------------------------------------------------------------------------------
// Endpoint
// ---------------------------------------------------------------------------------------------

const str = (o: Readonly<Record<string, unknown>>, ...keys: ReadonlyArray<string>): string | undefined => {
  for (const k of keys) {
    const v = o[k]
    if (typeof v === "string" && v !== "") return v
  }
  return undefined
}

/**
 * Reads the endpoint of a resource from its options: `baseUrl` (also `base_url`, `apiUrl`),
 * the key (`apiKey` / `api_key`, a string or a `Redacted`; else `apiKeyEnv` / `api_key_env`,
 * the name of an environment variable read through Effect's `Config`), `model`, and
 * `headers` (string values). Fails with a {@link ConfigError} naming the resource and the
 * field (never the key's value) when the base URL is missing or the variable is not set.
 *
 * @since 0.1.0
 * @category endpoint
 */
export const endpointOf = (resource: ResourceInfo): Effect.Effect<Endpoint, ConfigError> =>
  Effect.gen(function*() {
    const o = resource.options
    const issues: Array<ConfigIssue> = []
    const baseUrl = str(o, "baseUrl", "base_url", "apiUrl")
    if (baseUrl === undefined) {
      issues.push({ path: `resources.${resource.id}.options.baseUrl`, message: "the chat endpoint needs a baseUrl" })
    }
    const headers: Record<string, string> = {}
    const h = o["headers"]
    if (Predicate.isObject(h)) {
      for (const [k, v] of Object.entries(h)) if (typeof v === "string") headers[k] = v
    }
    let apiKey: Redacted.Redacted<string> | undefined
    const rawKey = o["apiKey"] ?? o["api_key"]
    if (Redacted.isRedacted(rawKey)) apiKey = rawKey as Redacted.Redacted<string>
    else if (typeof rawKey === "string" && rawKey !== "") apiKey = Redacted.make(rawKey)
    else {
      const envName = str(o, "apiKeyEnv", "api_key_env")
      if (envName !== undefined) {
        const fromEnv = yield* Effect.either(Config.redacted(envName))
        if (Either.isRight(fromEnv)) apiKey = fromEnv.right
        else {
          issues.push({
            path: `resources.${resource.id}.options.apiKeyEnv`,
            message: `the environment variable ${envName} is not set`
          })
        }
      }
    }
    if (issues.length > 0) {
      return yield* new ConfigError({
        message: `chat endpoint of resource ${resource.id}: ${issues.map((i) => i.message).join("; ")}`,
        issues
      })
    }
    return { baseUrl: baseUrl!.replace(/\/+$/, ""), apiKey, model: str(o, "model"), headers }
  })

// ---------------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------------

const Completion = Schema.Struct({
  model: Schema.optional(Schema.NullOr(Schema.String)),
  choices: Schema.NonEmptyArray(Schema.Struct({
    message: Schema.Struct({ content: Schema.String }),
    finish_reason: Schema.optional(Schema.NullOr(Schema.String))
  })),
  usage: Schema.optional(Schema.NullOr(Schema.Struct({
    prompt_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
    completion_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
    total_tokens: Schema.optional(Schema.NullOr(Schema.Number))
  })))
})
const decodeCompletion = Schema.decodeUnknownEither(Schema.parseJson(Completion))

const undiciGlobal = Layer.provide(NodeHttpClient.layerUndiciWithoutDispatcher, NodeHttpClient.dispatcherLayerGlobal)

const defaultHttpClient: Effect.Effect<HttpClient.HttpClient> = HttpClient.HttpClient.pipe(Effect.provide(undiciGlobal))

const errorMessageOfBody = (body: string): string => {
  try {
    const j = JSON.parse(body) as unknown
    if (Predicate.isObject(j)) {
      const e = (j as Record<string, unknown>)["error"]
      if (Predicate.isObject(e) && typeof (e as Record<string, unknown>)["message"] === "string") {
        return (e as Record<string, unknown>)["message"] as string
      }
      if (typeof e === "string") return e
    }
  } catch {
    // not JSON: use the text
  }
  return body.slice(0, 300)
}

/**
 * Builds the client of one endpoint (see {@link ChatClient}). `httpClient` defaults to
 * Node's undici client on the global dispatcher (keep-alive connection pooling, no scope to
 * manage). Every failure is a {@link ChatError} with its class (see the module header).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeChatClient = (
  resourceId: string,
  endpoint: Endpoint,
  httpClient: HttpClient.HttpClient
): ChatClient => {
  const secrets = secretsOf(endpoint)
  const url = `${endpoint.baseUrl}/chat/completions`
  const fail = (errorClass: ErrorClass, message: string, extra: { status?: number; retryAfterMs?: number } = {}) =>
    new ChatError({ message: maskText(message, secrets), errorClass, resourceId, ...extra })

  const onResponse = (
    response: HttpClientResponse.HttpClientResponse,
    model: string,
    started: number
  ): Effect.Effect<ChatCompletion, ChatError> =>
    Effect.gen(function*() {
      const body = yield* response.text.pipe(
        Effect.mapError(() => fail("connection", `${resourceId}: the response body could not be read (HTTP ${response.status})`))
      )
      const latencyMs = (yield* Clock.currentTimeMillis) - started
      if (response.status < 200 || response.status >= 300) {
        const status = response.status
        const errorClass = classOfStatus(status) ?? "upstream"
        const retryHeader = response.headers["retry-after"]
        const now = yield* Clock.currentTimeMillis
        const retryAfterMs = retryHeader === undefined ? undefined : parseRetryAfter(retryHeader, now)
        return yield* fail(
          errorClass,
          `${resourceId}: HTTP ${status}: ${errorMessageOfBody(body)}${
            retryAfterMs !== undefined ? ` (retry after ${retryAfterMs} ms)` : ""
          }`,
          { status, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) }
        )
      }
      const decoded = decodeCompletion(body)
      if (Either.isLeft(decoded)) {
        return yield* fail(
          "invalid",
          `${resourceId}: the answer is not a JSON chat completion (with choices[0].message.content): ${
            body.slice(0, 120)
          }`,
          { status: response.status }
        )
      }
      const c = decoded.right
      const usage = c.usage ?? {}
      const promptTokens = usage.prompt_tokens ?? 0
      const completionTokens = usage.completion_tokens ?? 0
      return {
        content: c.choices[0].message.content,
        model: c.model ?? model,
        finishReason: c.choices[0].finish_reason ?? null,
        usage: { promptTokens, completionTokens, totalTokens: usage.total_tokens ?? promptTokens + completionTokens },
        latencyMs
      } satisfies ChatCompletion
    })

  const complete = (request: ChatRequest): Effect.Effect<ChatCompletion, ChatError> =>
    Effect.gen(function*() {
      const model = request.model ?? endpoint.model
      if (model === undefined) {
        return yield* fail("fatal", `${resourceId}: no model given (set options.model on the resource or the task)`)
      }
      const body: Record<string, unknown> = {
        ...request.extraBody,
        model,
        messages: request.messages.map((m) => ({ role: m.role, content: m.content }))
      }
      if (request.temperature !== undefined) body["temperature"] = request.temperature
      if (request.maxTokens !== undefined) body["max_tokens"] = request.maxTokens
      let req = HttpClientRequest.post(url).pipe(
        HttpClientRequest.setHeaders(endpoint.headers),
        HttpClientRequest.acceptJson,
        HttpClientRequest.bodyUnsafeJson(body)
      )
      if (endpoint.apiKey !== undefined) req = HttpClientRequest.bearerToken(req, endpoint.apiKey)
      const started = yield* Clock.currentTimeMillis
      const call = Effect.scoped(
        httpClient.execute(req).pipe(
          Effect.mapError((e) => {
            const c = classify(e)
            return fail(c === "timeout" ? "timeout" : "connection", `${resourceId}: ${e.reason} error: ${describeCause(e)}`)
          }),
          Effect.flatMap((response) => onResponse(response, model, started))
        )
      )
      if (request.timeoutMs === undefined) return yield* call
      const timeoutMs = request.timeoutMs
      return yield* call.pipe(
        Effect.timeoutFail({
          duration: Duration.millis(timeoutMs),
          onTimeout: () => fail("timeout", `${resourceId}: no answer within ${timeoutMs} ms`)
        })
      )
    })

  return { _tag: "ChatClient", resourceId, baseUrl: endpoint.baseUrl, model: endpoint.model, complete }
}

/** The transport failure's own code or message (never the request, which holds the key). */
const describeCause = (e: { readonly cause?: unknown; readonly reason: string }): string => {
  const cause = e.cause
  if (Predicate.isObject(cause)) {
    const o = cause as Record<string, unknown>
    const inner = Predicate.isObject(o["cause"]) ? (o["cause"] as Record<string, unknown>) : undefined
    const code = o["code"] ?? inner?.["code"]
    if (typeof code === "string") return code
    if (typeof o["message"] === "string") return o["message"]
  }
  return e.reason
}

/**
 * Options of {@link chatClientFactory}: the `HttpClient` to use (default: undici on the
 * global dispatcher).
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatClientFactoryOptions {
  readonly httpClient?: HttpClient.HttpClient | undefined
}

/**
 * The resource client factory of chat endpoints: give it to `Resource.make("llm", { options:
 * { baseUrl, apiKeyEnv, model }, factory: chatClientFactory() })`. The pool calls it once per
 * resource; it reads the endpoint with {@link endpointOf} and fails with its
 * {@link ConfigError} (the acquire then fails with `ResourceUnavailable`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const chatClientFactory = (options: ChatClientFactoryOptions = {}): ClientFactory<ChatClient> => (resource) =>
  Effect.gen(function*() {
    const endpoint = yield* endpointOf(resource)
    const http = options.httpClient ?? (yield* defaultHttpClient)
    return makeChatClient(resource.id, endpoint, http)
  })

/**
 * Whether a value is a {@link ChatClient}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isChatClient = (u: unknown): u is ChatClient =>
  Predicate.isObject(u) && (u as { _tag?: unknown })._tag === "ChatClient"

// A resource declared without a factory (a config file cannot name one) still gets exactly one
// client, built here on first use.
const fallbackClients = new WeakMap<ResourceInfo, ChatClient>()

const clientOf = (lease: Lease<unknown>): Effect.Effect<ChatClient, ChatError> => {
  if (isChatClient(lease.client)) return Effect.succeed(lease.client)
  const cached = fallbackClients.get(lease.resource)
  if (cached !== undefined) return Effect.succeed(cached)
  return Effect.gen(function*() {
    const endpoint = yield* endpointOf(lease.resource).pipe(
      Effect.mapError((e) => new ChatError({ message: e.message, errorClass: "fatal", resourceId: lease.resource.id }))
    )
    const client = makeChatClient(lease.resource.id, endpoint, yield* defaultHttpClient)
    fallbackClients.set(lease.resource, client)
    return client
  })
}

// ---------------------------------------------------------------------------------------------
// The task
// ---------------------------------------------------------------------------------------------

/**
 * What the `chat` task accepts: `messages`, else a `prompt` string (sent as one user
 * message), else (with a `template` option) any object whose fields fill the template; a
 * bare string is a prompt. (The task's input type is not constrained to this shape, so that
 * rows declared as interfaces fit; an input that yields no message fails with class
 * `invalid`.)
 *
 * @since 0.1.0
 * @category models
 */
export type ChatInput =
  | string
  | { readonly messages?: ReadonlyArray<ChatMessage> | undefined; readonly prompt?: string | undefined; readonly [key: string]: unknown }

/**
 * What the `chat` task returns: its `input` (so that later tasks keep the row), the answer's
 * `content`, the `model` that answered, `finishReason`, `usage`, the `resourceId` that
 * served it and the `latencyMs` (milliseconds).
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatOutput<In> {
  readonly input: In
  readonly content: string
  readonly model: string
  readonly finishReason: string | null
  readonly usage: ChatUsage
  readonly resourceId: string
  readonly latencyMs: number
}

/**
 * Options of {@link chat}:
 *
 * - `name` (default `"chat"`), `retry` (default: 6 attempts, exponential from 500 ms, capped at
 *   30 s, full jitter; a server's Retry-After always wins), `timeout` (per attempt, applied by
 *   the runner), `version`, `config`: as in `Task.make`;
 * - `resource`: the pool to lease from (default `"llm"`); `selector`: which resources may
 *   serve (no `where`: it cannot be part of the identity); `algorithm`: the acquire algorithm;
 * - `model` (overrides the endpoint's), `temperature`, `maxTokens`;
 * - `system`: a system message put first; `template`: a user message with `{{field}}`
 *   placeholders filled from the input's fields (`{{.}}` is the whole input as text);
 * - `requestTimeout`: the HTTP request deadline (default 60 s); past it the call fails with
 *   class `timeout` and counts against the resource's health.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatOptions {
  readonly name?: string | undefined
  readonly retry?: RetryPolicy | RetryPolicyInput | undefined
  readonly timeout?: Duration.DurationInput | null | undefined
  readonly version?: string | null | undefined
  readonly config?: Task.JsonObject | undefined
  readonly resource?: string | undefined
  readonly selector?: Omit<Selector, "where"> | undefined
  readonly algorithm?: AlgorithmInput | null | undefined
  readonly model?: string | undefined
  readonly temperature?: number | undefined
  readonly maxTokens?: number | undefined
  readonly system?: string | undefined
  readonly template?: string | undefined
  readonly requestTimeout?: Duration.DurationInput | undefined
}

const knownOptions = [
  "name",
  "retry",
  "timeout",
  "version",
  "config",
  "resource",
  "selector",
  "algorithm",
  "model",
  "temperature",
  "maxTokens",
  "system",
  "template",
  "requestTimeout"
]

/**
 * The default retry policy of {@link chat}: 6 attempts, 500 ms base, factor 2, capped at
 * 30 s, full jitter, retrying rate_limit / timeout / connection / upstream.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultChatRetry: RetryPolicyInput = { maxAttempts: 6, base: "500 millis", factor: 2, cap: "30 seconds", jitter: "full" }

/**
 * Fills `{{field}}` placeholders from an object's fields (dot paths allowed; missing fields
 * become empty; non-strings are JSON); `{{.}}` is the whole value (a string as is).
 *
 * @since 0.1.0
 * @category prompt
 */
export const renderTemplate = (template: string, input: unknown): string =>
  template.replace(/\{\{\s*([^}\s]+)\s*\}\}/g, (_, path: string) => {
    let cur: unknown = input
    if (path !== ".") {
      for (const k of path.split(".")) cur = Predicate.isObject(cur) ? (cur as Record<string, unknown>)[k] : undefined
    }
    return cur === undefined || cur === null ? "" : typeof cur === "string" ? cur : JSON.stringify(cur)
  })

const isMessage = (u: unknown): u is ChatMessage =>
  Predicate.isObject(u) && typeof (u as Record<string, unknown>)["role"] === "string" &&
  typeof (u as Record<string, unknown>)["content"] === "string"

const messagesOf = (
  input: unknown,
  system: string | undefined,
  template: string | undefined
): Option.Option<ReadonlyArray<ChatMessage>> => {
  const withSystem = (ms: ReadonlyArray<ChatMessage>) =>
    system === undefined ? ms : [{ role: "system", content: system }, ...ms]
  if (template !== undefined) return Option.some(withSystem([{ role: "user", content: renderTemplate(template, input) }]))
  if (typeof input === "string") return Option.some(withSystem([{ role: "user", content: input }]))
  if (Predicate.isObject(input)) {
    const o = input as Record<string, unknown>
    const ms = o["messages"]
    if (Array.isArray(ms) && ms.length > 0 && ms.every(isMessage)) return Option.some(withSystem(ms))
    if (typeof o["prompt"] === "string") return Option.some(withSystem([{ role: "user", content: o["prompt"] }]))
  }
  return Option.none()
}

/**
 * The built-in `chat` task: lease a resource of the pool (scoped: released on every exit
 * path), send one chat completion through its {@link ChatClient}, report latency and usage
 * (or an endpoint fault) to the lease, and return a {@link ChatOutput}.
 *
 * Fails with a {@link ChatError} (classified; see the module header) or the acquire's
 * errors. An input that yields no messages fails with class `invalid`.
 *
 * Identity: `parameters` records `{ model, temperature, maxTokens, system, template,
 * requestTimeoutMs, selector }` (never an endpoint's key or URL: those belong to the
 * resources); the task's `resource` is the pool.
 *
 * Throws a {@link ConfigError} (with field paths) for unknown option keys, a temperature
 * outside [0, 2], a non-positive or fractional `maxTokens`, a bad duration, or a `where`
 * selector.
 *
 * @since 0.1.0
 * @category tasks
 */
export const chat = <In = ChatInput>(
  options: ChatOptions = {}
): Task.Task<In, ChatOutput<In>, ChatError | AcquireError> => {
  const issues: Array<ConfigIssue> = []
  for (const key of Object.keys(options)) {
    if (!knownOptions.includes(key)) {
      issues.push({ path: key, message: `unknown option "${key}"`, suggestion: `known options: ${knownOptions.join(", ")}` })
    }
  }
  if (options.name !== undefined && (typeof options.name !== "string" || options.name.trim() === "")) {
    issues.push({ path: "name", message: "name must be a non-empty string" })
  }
  const t = options.temperature
  if (t !== undefined && !(typeof t === "number" && t >= 0 && t <= 2)) {
    issues.push({ path: "temperature", message: `temperature must be a number in [0, 2], got ${String(t)}` })
  }
  const mt = options.maxTokens
  if (mt !== undefined && !(Number.isInteger(mt) && mt > 0)) {
    issues.push({ path: "maxTokens", message: `maxTokens must be a positive integer, got ${String(mt)}` })
  }
  let requestTimeoutMs = 60_000
  if (options.requestTimeout !== undefined) {
    const d = Duration.decodeUnknown(options.requestTimeout)
    if (Option.isNone(d) || !Duration.isFinite(d.value) || Duration.toMillis(d.value) <= 0) {
      issues.push({ path: "requestTimeout", message: "requestTimeout must be a finite, positive duration" })
    } else requestTimeoutMs = Duration.toMillis(d.value)
  }
  const selector = options.selector ?? {}
  if ("where" in selector) {
    issues.push({ path: "selector.where", message: "a where predicate cannot be part of the task identity" })
  }
  if (issues.length > 0) {
    throw new ConfigError({ message: `chat: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`, issues })
  }
  const selectorJson: Record<string, unknown> = {}
  if (selector.id !== undefined) selectorJson["id"] = selector.id
  if (selector.kind !== undefined) selectorJson["kind"] = selector.kind
  if (selector.tags !== undefined) selectorJson["tags"] = selector.tags
  if (selector.options !== undefined) selectorJson["options"] = selector.options
  const acquireOptions: Selector = { ...selectorJson }
  const { maxTokens, model, system, template, temperature } = options
  const parameters = {
    model: model ?? null,
    temperature: temperature ?? null,
    maxTokens: maxTokens ?? null,
    system: system ?? null,
    template: template ?? null,
    requestTimeoutMs,
    selector: selectorJson
  } as Task.JsonObject
  const base: Task.BaseOptions = {
    resource: options.resource ?? "llm",
    retry: options.retry ?? defaultChatRetry,
    parameters,
    codeDigest: "assay.chat/v1",
    ...(options.timeout !== undefined ? { timeout: options.timeout } : {}),
    ...(options.version !== undefined ? { version: options.version } : {}),
    ...(options.config !== undefined ? { config: options.config } : {}),
    ...(options.algorithm !== undefined ? { algorithm: options.algorithm } : {})
  }
  return Task.make(options.name ?? "chat", base, (input: In, ctx) =>
    Effect.scoped(
      Effect.gen(function*() {
        const messages = messagesOf(input, system, template)
        if (Option.isNone(messages)) {
          return yield* new ChatError({
            message: "chat: the input has no messages, no prompt and the task no template",
            errorClass: "invalid"
          })
        }
        const lease = yield* ctx.acquire(acquireOptions)
        const client = yield* clientOf(lease)
        const started = yield* Clock.currentTimeMillis
        const result = yield* Effect.either(client.complete({
          messages: messages.value,
          model,
          temperature,
          maxTokens,
          timeoutMs: requestTimeoutMs
        }))
        if (Either.isLeft(result)) {
          const error = result.left
          const latencyMs = (yield* Clock.currentTimeMillis) - started
          yield* lease.report(
            endpointFaultClasses.has(error.errorClass) ? { ok: false, latencyMs, error } : { latencyMs }
          )
          return yield* error
        }
        const c = result.right
        yield* lease.report({
          ok: true,
          latencyMs: c.latencyMs,
          usage: {
            tokens: c.usage.totalTokens,
            promptTokens: c.usage.promptTokens,
            completionTokens: c.usage.completionTokens
          }
        })
        return {
          input,
          content: c.content,
          model: c.model,
          finishReason: c.finishReason,
          usage: c.usage,
          resourceId: lease.resource.id,
          latencyMs: c.latencyMs
        } satisfies ChatOutput<In>
      })
    ))
}

/**
 * Whether an error class is one {@link chat} reports as the endpoint's fault.
 *
 * @since 0.1.0
 * @category guards
 */
export const isEndpointFault = (errorClass: unknown): boolean =>
  isErrorClass(errorClass) && endpointFaultClasses.has(errorClass)
