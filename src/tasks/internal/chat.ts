/**
 * The built-in `chat` task: one OpenAI-compatible chat completion per attempt, through a
 * leased resource of a pool (default pool `"llm"`).
 *
 * **The endpoint comes from the resource.** A resource's `options` name its endpoint:
 * `baseUrl` (the OpenAI base URL, e.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is
 * appended to its path and its query string kept, see {@link completionsUrl}), the key
 * (`apiKey`, or `apiKeyEnv`: the name of an environment variable holding it, so that config
 * files never contain the key), a default `model` and extra `headers`.
 * {@link chatClientFactory} builds one {@link ChatClient} per resource (the pool calls it once,
 * lazily); the task calls `lease.client.complete(...)`. Requests honour `HTTPS_PROXY` /
 * `HTTP_PROXY` / `NO_PROXY` in any case ({@link defaultHttpClient}).
 *
 * **Errors are classified at the adapter boundary** into a {@link ChatError} whose
 * `errorClass` drives retry and pool health: HTTP 429 → `rate_limit` with the wait the server
 * names (`retry-after-ms`, `Retry-After`, `x-ratelimit-reset-*`, a hint in the JSON body; see
 * `RateLimit`) in `retryAfterMs`; 5xx → `upstream`; 408/504 and a request deadline →
 * `timeout`; refused/reset connections and unresolvable hosts → `connection`; an error object
 * inside a 200 → by its embedded code ({@link classOfEmbeddedError}); a 200 without text (the
 * content filter, a refusal) or a body that is not a chat completion → `invalid`; any other
 * 4xx → `fatal`. Latency (ms, from `Clock`) and token usage are reported to the lease
 * (`usage: { tokens, promptTokens, completionTokens }`, with the answering `model`, whether the
 * tokens are `estimated` and the server's own `costUsd`, which the run prices; see `Pricing`),
 * with what the answer's
 * `x-ratelimit-*` headers said about the key's limits (`rateLimit`, read by the `adaptive`
 * algorithm); a failure is reported `ok: false` only when it is the endpoint's fault
 * (rate_limit, upstream, connection, timeout).
 *
 * **No secret leaves the client.** The key is held as a `Redacted` and sent only in the
 * `Authorization` header; every message a {@link ChatError} carries is masked (every form of
 * the key, of every non-public header value and of the URL's userinfo and query secrets; see
 * `Secrets`) before it is cut. No raw HTTP error object (whose request carries the
 * Authorization header) ever leaves this module.
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
import { Clock, Config, Duration, Effect, Either, Option, Predicate, Redacted, Schema } from "effect"
import * as Undici from "undici"
import type * as CallCache from "../../domain/CallCache.js"
import { canonicalJsonUnsafe } from "../../domain/Json.js"
import { ConfigError, type ConfigIssue, classify, classOfStatus, ErrorClass, isErrorClass } from "../../domain/Errors.js"
import type { AcquireError, AlgorithmInput, Lease, ResourceInfo, Selector } from "../../domain/Lease.js"
import * as Pricing from "../../domain/Pricing.js"
import * as RateLimit from "../../domain/RateLimit.js"
import * as Secrets from "../../domain/Secrets.js"
import type { ClientFactory } from "../../domain/Resource.js"
import type { RetryPolicy, RetryPolicyInput } from "../../domain/RetryPolicy.js"
import * as Task from "../../domain/Task.js"

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
 * Token usage of one completion, as the server reported it (`totalTokens` defaults to
 * prompt + completion). When the answer has no `usage` (or neither `prompt_tokens` nor
 * `completion_tokens`), the counts are estimated at one token per 4 characters
 * (`Pricing.estimateTokens`: the messages' contents in, the answer's content out) and
 * `estimated` is `true`. `costUsd` is the cost the server reported (`usage.cost`, US
 * dollars), when it did; a configured price wins over it (see `Pricing`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatUsage {
  readonly promptTokens: number
  readonly completionTokens: number
  readonly totalTokens: number
  readonly estimated?: boolean | undefined
  readonly costUsd?: number | undefined
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
  /** What the answer's `x-ratelimit-*` headers said about the key's limits, when it sent any. */
  readonly rateLimit?: RateLimit.RateLimitStatus | undefined
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
 * An endpoint as read from a resource's options (see {@link endpointOf}): `baseUrl` as
 * written with its secrets masked (for display), `url` the chat-completions URL (query kept,
 * userinfo taken out), the key, the userinfo as `user:password` for HTTP Basic
 * authentication (`basicAuth`, used when there is no key), the default model, the extra
 * headers, and `secrets`: every value to mask in messages.
 *
 * @since 0.1.0
 * @category models
 */
export interface Endpoint {
  readonly baseUrl: string
  readonly url: string
  readonly apiKey: Redacted.Redacted<string> | undefined
  readonly basicAuth: Redacted.Redacted<string> | undefined
  readonly model: string | undefined
  readonly headers: Readonly<Record<string, string>>
  readonly secrets: ReadonlyArray<string>
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

/**
 * Replaces every form (raw, URL-encoded, HTML- and JSON-escaped, base64) of each secret
 * (strings of 4+ characters) in `text` by `***`; see `Secrets.maskText`.
 *
 * @since 0.1.0
 * @category secrets
 */
export const maskText = (text: string, secrets: ReadonlyArray<string>): string => Secrets.maskText(text, secrets)

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
 * The URL chat completions are sent to, from a base URL: `/chat/completions` is appended to
 * the path (one slash, whatever the base ends with; not again when the base already ends with
 * it), the query string is kept after it
 * (`…/deployments/d1?api-version=2024-02-01` → `…/deployments/d1/chat/completions?api-version=…`),
 * a fragment is dropped, and the userinfo is taken out (returned apart, decoded; the client
 * sends it as HTTP Basic authentication when there is no key). Fails with a message when the
 * base is not an absolute `http:` / `https:` URL.
 *
 * @since 0.1.0
 * @category endpoint
 */
export const completionsUrl = (
  baseUrl: string
): Either.Either<{ readonly url: string; readonly user: string; readonly password: string }, string> => {
  let u: URL
  try {
    u = new URL(baseUrl.trim())
  } catch {
    return Either.left("the baseUrl is not an absolute URL (http://host/path)")
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    return Either.left(`the baseUrl must be http: or https:, not ${u.protocol}`)
  }
  const decode = (s: string) => {
    try {
      return decodeURIComponent(s)
    } catch {
      return s
    }
  }
  const user = decode(u.username)
  const password = decode(u.password)
  u.username = ""
  u.password = ""
  u.hash = ""
  // a base that already names the endpoint (…/v1/chat/completions) is taken as it is
  const path = u.pathname.replace(/\/+$/, "")
  u.pathname = /\/chat\/completions$/.test(path) ? path : `${path}/chat/completions`
  return Either.right({ url: u.toString(), user, password })
}

/**
 * Reads the endpoint of a resource from its options: `baseUrl` (also `base_url`, `apiUrl`;
 * see {@link completionsUrl}), the key (`apiKey` / `api_key`, a string or a `Redacted`; else
 * `apiKeyEnv` / `api_key_env`, the name of an environment variable read through Effect's
 * `Config`), `model`, and `headers` (string values). Its `secrets` are every value to mask:
 * the key, every header value except `Secrets.publicHeaders`, the URL's userinfo and
 * non-public query values.
 *
 * Fails with a {@link ConfigError} naming the resource and the field (never a secret's value)
 * when the base URL is missing or malformed, the variable is not set, or the key or a header
 * value holds whitespace or a control character (a key read from a file with its trailing
 * newline cannot be sent in a header: refused at once rather than retried as a connection
 * failure).
 *
 * @since 0.1.0
 * @category endpoint
 */
export const endpointOf = (resource: ResourceInfo): Effect.Effect<Endpoint, ConfigError> =>
  Effect.gen(function*() {
    const o = resource.options
    const at = `resources.${resource.id}.options`
    const issues: Array<ConfigIssue> = []
    const baseUrl = str(o, "baseUrl", "base_url", "apiUrl")
    let target: { readonly url: string; readonly user: string; readonly password: string } | undefined
    if (baseUrl === undefined) {
      issues.push({ path: `${at}.baseUrl`, message: "the chat endpoint needs a baseUrl" })
    } else {
      const parsed = completionsUrl(baseUrl)
      if (Either.isLeft(parsed)) issues.push({ path: `${at}.baseUrl`, message: parsed.left })
      else target = parsed.right
    }
    const headers: Record<string, string> = {}
    const h = o["headers"]
    if (Predicate.isObject(h)) {
      for (const [k, v] of Object.entries(h)) {
        if (typeof v !== "string") continue
        if (/[\r\n\u0000]/.test(v)) {
          issues.push({ path: `${at}.headers.${k}`, message: `the value of header ${k} holds a line break or NUL` })
        } else headers[k] = v
      }
    }
    let apiKey: Redacted.Redacted<string> | undefined
    const rawKey = o["apiKey"] ?? o["api_key"]
    const checkKey = (value: string, what: string, path: string) => {
      if (Secrets.hasWhitespaceOrControl(value)) {
        issues.push({
          path,
          message: `${what} holds whitespace or control characters (a trailing newline?); remove them`
        })
        return false
      }
      return true
    }
    if (Redacted.isRedacted(rawKey)) {
      const value = Redacted.value(rawKey as Redacted.Redacted<unknown>)
      if (typeof value === "string" && checkKey(value, "the apiKey", `${at}.apiKey`)) apiKey = rawKey as Redacted.Redacted<string>
    } else if (typeof rawKey === "string" && rawKey !== "") {
      if (checkKey(rawKey, "the apiKey", `${at}.apiKey`)) apiKey = Redacted.make(rawKey)
    } else {
      const envName = str(o, "apiKeyEnv", "api_key_env")
      if (envName !== undefined && !isEnvName(envName)) {
        // not a variable's name: maybe the key itself (`apiKeyEnv: "${KEY}"`), never shown
        issues.push({ path: `${at}.apiKeyEnv`, message: `apiKeyEnv holds no environment variable's name (what it holds is not shown)` })
      } else if (envName !== undefined) {
        const fromEnv = yield* Effect.either(Config.redacted(envName))
        if (Either.isRight(fromEnv)) {
          if (checkKey(Redacted.value(fromEnv.right), `the environment variable ${envName}`, `${at}.apiKeyEnv`)) {
            apiKey = fromEnv.right
          }
        } else {
          issues.push({ path: `${at}.apiKeyEnv`, message: `the environment variable ${envName} is not set` })
        }
      }
    }
    if (issues.length > 0) {
      return yield* new ConfigError({
        message: `chat endpoint of resource ${resource.id}: ${issues.map((i) => i.message).join("; ")}`,
        issues
      })
    }
    const secrets: Array<string> = []
    if (apiKey !== undefined) secrets.push(Redacted.value(apiKey))
    for (const [k, v] of Object.entries(headers)) if (!Secrets.isPublicHeader(k)) secrets.push(v)
    secrets.push(...Secrets.secretsOfUrl(baseUrl!.trim()))
    const { password, url, user } = target!
    if (user !== "" || password !== "") secrets.push(user, password, `${user}:${password}`)
    return {
      baseUrl: Secrets.maskUrl(baseUrl!.trim()),
      url,
      apiKey,
      basicAuth: user === "" && password === "" ? undefined : Redacted.make(`${user}:${password}`),
      model: str(o, "model"),
      headers,
      secrets: secrets.filter((s) => s !== "")
    }
  })

// ---------------------------------------------------------------------------------------------
// Proxies
// ---------------------------------------------------------------------------------------------

/**
 * The proxy settings of the environment: `https_proxy` / `HTTPS_PROXY`, `http_proxy` /
 * `HTTP_PROXY`, `no_proxy` / `NO_PROXY` (lower case first, as curl and undici read them), read
 * through Effect's `Config`.
 *
 * @since 0.1.0
 * @category proxies
 */
export interface ProxySettings {
  readonly httpProxy: string | undefined
  readonly httpsProxy: string | undefined
  readonly noProxy: string | undefined
}

const envVar = (lower: string) =>
  Effect.map(
    Effect.all([
      Effect.orElseSucceed(Config.string(lower), () => undefined),
      Effect.orElseSucceed(Config.string(lower.toUpperCase()), () => undefined)
    ]),
    ([l, u]) => (l !== undefined && l !== "" ? l : u !== undefined && u !== "" ? u : undefined)
  )

/**
 * Reads {@link ProxySettings} from the current `ConfigProvider` (the environment by default).
 * `httpsProxy` falls back to `httpProxy` (undici's rule).
 *
 * @since 0.1.0
 * @category proxies
 */
export const proxySettings: Effect.Effect<ProxySettings> = Effect.map(
  Effect.all([envVar("http_proxy"), envVar("https_proxy"), envVar("no_proxy")]),
  ([httpProxy, httpsProxy, noProxy]) => ({ httpProxy, httpsProxy: httpsProxy ?? httpProxy, noProxy })
)

// One dispatcher per distinct proxy setting, for the life of the process, like undici's global
// dispatcher (idle keep-alive sockets do not keep the process alive).
const proxyDispatchers = new Map<string, Undici.Dispatcher>()

/**
 * The undici dispatcher for some proxy settings: the global dispatcher when no proxy is set;
 * otherwise one `EnvHttpProxyAgent` (undici's agent that sends each request through the
 * proxy of its scheme unless its host matches `NO_PROXY`), shared by every client with the
 * same settings.
 *
 * @since 0.1.0
 * @category proxies
 */
export const dispatcherFor = (settings: ProxySettings): Undici.Dispatcher => {
  if (settings.httpProxy === undefined && settings.httpsProxy === undefined) return Undici.getGlobalDispatcher()
  const key = JSON.stringify(settings)
  let d = proxyDispatchers.get(key)
  if (d === undefined) {
    d = new Undici.EnvHttpProxyAgent({
      ...(settings.httpProxy !== undefined ? { httpProxy: settings.httpProxy } : {}),
      ...(settings.httpsProxy !== undefined ? { httpsProxy: settings.httpsProxy } : {}),
      ...(settings.noProxy !== undefined ? { noProxy: settings.noProxy } : {})
    })
    proxyDispatchers.set(key, d)
  }
  return d
}

/**
 * The default `HttpClient` of chat endpoints: undici (keep-alive connection pooling) on the
 * dispatcher of {@link dispatcherFor} for the environment's {@link proxySettings}, so that
 * `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` (any case) are honoured.
 *
 * @since 0.1.0
 * @category proxies
 */
export const defaultHttpClient: Effect.Effect<HttpClient.HttpClient> = Effect.map(
  proxySettings,
  (s) => NodeHttpClient.makeUndici(dispatcherFor(s))
)

// ---------------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------------

const Completion = Schema.Struct({
  model: Schema.optional(Schema.NullOr(Schema.String)),
  choices: Schema.NonEmptyArray(Schema.Struct({
    message: Schema.optional(Schema.NullOr(Schema.Struct({
      content: Schema.optional(Schema.NullOr(Schema.String)),
      refusal: Schema.optional(Schema.NullOr(Schema.String)),
      tool_calls: Schema.optional(Schema.Unknown)
    }))),
    finish_reason: Schema.optional(Schema.NullOr(Schema.String)),
    content_filter_results: Schema.optional(Schema.Unknown)
  })),
  usage: Schema.optional(Schema.NullOr(Schema.Struct({
    prompt_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
    completion_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
    total_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
    // what the call cost, when the server says (OpenRouter, the mock): USD
    cost: Schema.optional(Schema.NullOr(Schema.Number))
  })))
})
const decodeCompletion = Schema.decodeUnknownEither(Completion)

const parseJson = (body: string): unknown => {
  try {
    return JSON.parse(body) as unknown
  } catch {
    return undefined
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> => Predicate.isObject(u) && !Array.isArray(u)

/** The error object of an error body: `error` (an object or a string), else the body itself when it has a message. */
const errorObjectOf = (json: unknown): Record<string, unknown> | undefined => {
  if (!isRecord(json)) return undefined
  const e = json["error"]
  if (isRecord(e)) return e
  if (typeof e === "string") return { message: e }
  if (typeof json["message"] === "string" && json["choices"] === undefined) return json
  return undefined
}

const messageOfBody = (json: unknown, body: string): string => {
  const e = errorObjectOf(json)
  if (e !== undefined && typeof e["message"] === "string") return e["message"]
  return body
}

const grpcClasses: Record<string, ErrorClass> = {
  RESOURCE_EXHAUSTED: "rate_limit",
  UNAVAILABLE: "upstream",
  INTERNAL: "upstream",
  UNKNOWN: "upstream",
  DEADLINE_EXCEEDED: "timeout",
  INVALID_ARGUMENT: "fatal",
  FAILED_PRECONDITION: "fatal",
  PERMISSION_DENIED: "fatal",
  UNAUTHENTICATED: "fatal",
  NOT_FOUND: "fatal"
}

const typeClasses: Record<string, ErrorClass> = {
  rate_limit_error: "rate_limit",
  rate_limit_exceeded: "rate_limit",
  rate_limited: "rate_limit",
  too_many_requests: "rate_limit",
  overloaded_error: "upstream",
  overloaded: "upstream",
  server_error: "upstream",
  api_error: "upstream",
  internal_error: "upstream",
  service_unavailable: "upstream",
  timeout_error: "timeout",
  timeout: "timeout",
  invalid_request_error: "fatal",
  authentication_error: "fatal",
  permission_error: "fatal",
  not_found_error: "fatal",
  content_filter: "invalid"
}

/**
 * Classifies an error object found in the body of an HTTP 200 (OpenRouter and other gateways
 * answer `200 {"error":{"code":502,…}}` when the provider behind them failed): by its embedded
 * HTTP status (`code` or `status`, a number or a 3-digit string: 429 → `rate_limit`, 502 →
 * `upstream`, …), else its gRPC status name (`RESOURCE_EXHAUSTED` → `rate_limit`,
 * `UNAVAILABLE` → `upstream`, …), else its `type` / `code` name (`rate_limit_error`,
 * `overloaded_error`, `server_error`, `invalid_request_error`, …); otherwise `upstream` (the
 * server failed to answer: retried). Returns the class and the embedded status, if any.
 *
 * @since 0.1.0
 * @category classification
 */
export const classOfEmbeddedError = (
  error: Readonly<Record<string, unknown>>
): { readonly errorClass: ErrorClass; readonly status: number | undefined } => {
  for (const key of ["code", "status", "status_code", "http_status"]) {
    const v = error[key]
    const n = typeof v === "number" ? v : typeof v === "string" && /^\d{3}$/.test(v) ? Number(v) : undefined
    if (n !== undefined && Number.isInteger(n) && n >= 400 && n <= 599) {
      return { errorClass: classOfStatus(n) ?? "upstream", status: n }
    }
  }
  for (const key of ["status", "code", "type"]) {
    const v = error[key]
    if (typeof v !== "string") continue
    const c = grpcClasses[v] ?? typeClasses[v.toLowerCase()]
    if (c !== undefined) return { errorClass: c, status: undefined }
  }
  return { errorClass: "upstream", status: undefined }
}

/** Why a choice without text is not an answer, in words (Azure's content-filter categories named). */
const noContentReason = (choice: typeof Completion.Type["choices"][0]): string => {
  const finish = choice.finish_reason ?? null
  if (finish === "content_filter") {
    const results = choice.content_filter_results
    const hits = isRecord(results)
      ? Object.entries(results).filter(([, r]) => isRecord(r) && r["filtered"] === true).map(([k]) => k)
      : []
    return `content filter: the provider withheld the answer (finish_reason content_filter${
      hits.length > 0 ? `; filtered: ${hits.join(", ")}` : ""
    })`
  }
  const refusal = choice.message?.refusal
  if (typeof refusal === "string" && refusal !== "") return `the model refused: ${refusal}`
  if (choice.message?.tool_calls !== undefined && choice.message?.tool_calls !== null) {
    return `the answer is a tool call, not text (finish_reason ${finish ?? "null"})`
  }
  return `the answer has no content (finish_reason ${finish ?? "null"})`
}

/**
 * Longest error message a {@link ChatError} carries, in characters (masked first, then cut).
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_ERROR_MESSAGE = 600

const describeHint = (h: RateLimit.RateLimitHint): string =>
  ` (the server asks to wait ${RateLimit.formatWait(h.delayMs)}, until ${new Date(h.untilMs).toISOString()}; from ${h.source})`

/**
 * Builds the client of one endpoint (see {@link ChatClient}). `httpClient` defaults to
 * {@link defaultHttpClient} (undici, proxies from the environment). Every failure is a
 * {@link ChatError} with its class (see the module header); every message is masked (every
 * form of every secret of the endpoint) before it is cut to {@link MAX_ERROR_MESSAGE}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeChatClient = (
  resourceId: string,
  endpoint: Endpoint,
  httpClient: HttpClient.HttpClient
): ChatClient => {
  const secrets = endpoint.secrets
  const url = endpoint.url
  const host = (() => {
    try {
      return new URL(url).host
    } catch {
      return url
    }
  })()
  const fail = (errorClass: ErrorClass, message: string, extra: { status?: number; retryAfterMs?: number } = {}) =>
    new ChatError({ message: Secrets.maskThenTruncate(message, secrets, MAX_ERROR_MESSAGE), errorClass, resourceId, ...extra })

  const onResponse = (
    response: HttpClientResponse.HttpClientResponse,
    model: string,
    started: number,
    messages: ReadonlyArray<ChatMessage>
  ): Effect.Effect<ChatCompletion, ChatError> =>
    Effect.gen(function*() {
      const body = yield* response.text.pipe(
        Effect.mapError(() => fail("connection", `${resourceId}: the response body could not be read (HTTP ${response.status})`))
      )
      const now = yield* Clock.currentTimeMillis
      const latencyMs = now - started
      const json = parseJson(body)
      const header = (name: string) => response.headers[name]
      if (response.status < 200 || response.status >= 300) {
        const status = response.status
        const errorClass = classOfStatus(status) ?? "upstream"
        const hint = RateLimit.hintOf(header, json, now)
        return yield* fail(
          errorClass,
          `${resourceId}: HTTP ${status}: ${messageOfBody(json, body)}${hint !== undefined ? describeHint(hint) : ""}`,
          { status, ...(hint !== undefined ? { retryAfterMs: hint.delayMs } : {}) }
        )
      }
      const decoded = decodeCompletion(json)
      if (Either.isLeft(decoded)) {
        const embedded = errorObjectOf(json)
        if (embedded !== undefined) {
          const { errorClass, status } = classOfEmbeddedError(embedded)
          const hint = RateLimit.hintOf(header, json, now)
          return yield* fail(
            errorClass,
            `${resourceId}: HTTP ${response.status} with an error in its body${status !== undefined ? ` (code ${status})` : ""}: ${
              messageOfBody(json, body)
            }${hint !== undefined ? describeHint(hint) : ""}`,
            { status: status ?? response.status, ...(hint !== undefined ? { retryAfterMs: hint.delayMs } : {}) }
          )
        }
        return yield* fail(
          "invalid",
          `${resourceId}: the answer is not a JSON chat completion (with choices[0].message.content): ${body}`,
          { status: response.status }
        )
      }
      const c = decoded.right
      const choice = c.choices[0]
      const content = choice.message?.content
      if (typeof content !== "string") {
        return yield* fail("invalid", `${resourceId}: ${noContentReason(choice)}`, { status: response.status })
      }
      const usage = c.usage ?? {}
      // no token counts from the server: estimated (one token per 4 characters) and marked
      const estimated = (usage.prompt_tokens ?? null) === null && (usage.completion_tokens ?? null) === null
      const promptTokens = estimated
        ? messages.reduce((n, m) => n + Pricing.estimateTokens(m.content), 0)
        : usage.prompt_tokens ?? 0
      const completionTokens = estimated ? Pricing.estimateTokens(content) : usage.completion_tokens ?? 0
      const serverCost = usage.cost
      const rateLimit = RateLimit.statusOfHeaders(header, now)
      return {
        ...(rateLimit !== undefined ? { rateLimit } : {}),
        // a model that echoes the request (a debugging proxy, a prompt that quotes headers)
        // must not put the key into the store: the answer is masked like every error text
        content: secrets.length === 0 ? content : Secrets.maskText(content, secrets),
        model: c.model ?? model,
        finishReason: choice.finish_reason ?? null,
        usage: {
          promptTokens,
          completionTokens,
          totalTokens: estimated ? promptTokens + completionTokens : usage.total_tokens ?? promptTokens + completionTokens,
          ...(estimated ? { estimated: true } : {}),
          ...(typeof serverCost === "number" && Number.isFinite(serverCost) && serverCost >= 0 ? { costUsd: serverCost } : {})
        },
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
      else if (endpoint.basicAuth !== undefined) {
        const [user, ...rest] = Redacted.value(endpoint.basicAuth).split(":")
        req = HttpClientRequest.basicAuth(req, user ?? "", rest.join(":"))
      }
      const started = yield* Clock.currentTimeMillis
      const call = Effect.scoped(
        httpClient.execute(req).pipe(
          Effect.mapError((e) => {
            const c = classify(e)
            return fail(c === "timeout" ? "timeout" : "connection", `${resourceId}: ${describeTransport(e, host)}`)
          }),
          Effect.flatMap((response) => onResponse(response, model, started, request.messages))
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
const causeCode = (e: { readonly cause?: unknown }): { code: string | undefined; message: string | undefined } => {
  let cur: unknown = e.cause
  let message: string | undefined
  for (let depth = 0; depth < 4 && Predicate.isObject(cur); depth++) {
    const o = cur as Record<string, unknown>
    if (typeof o["code"] === "string") return { code: o["code"], message: message ?? (typeof o["message"] === "string" ? o["message"] : undefined) }
    if (message === undefined && typeof o["message"] === "string") message = o["message"]
    cur = o["cause"]
  }
  return { code: undefined, message }
}

/**
 * A transport failure in words: "cannot resolve host H" (ENOTFOUND, EAI_AGAIN), "connection
 * refused by H" (ECONNREFUSED), "connection reset by H" (ECONNRESET, socket closed), else the
 * error's code or message. `host` is the endpoint's `host[:port]`.
 */
const describeTransport = (e: { readonly cause?: unknown; readonly reason: string }, host: string): string => {
  const { code, message } = causeCode(e)
  const hostname = host.replace(/:\d+$/, "")
  switch (code) {
    case "ENOTFOUND":
    case "EAI_AGAIN":
    case "EAI_NONAME":
    case "EAI_FAIL":
      return `cannot resolve host ${hostname} (${code})`
    case "ECONNREFUSED":
      return `connection refused by ${host} (ECONNREFUSED)`
    case "ECONNRESET":
    case "UND_ERR_SOCKET":
    case "UND_ERR_CLOSED":
      return `connection reset by ${host} (${code})`
    case "ETIMEDOUT":
    case "UND_ERR_CONNECT_TIMEOUT":
      return `connecting to ${host} timed out (${code})`
    case undefined:
      return `${e.reason} error: ${message ?? e.reason}`
    default:
      return `${e.reason} error talking to ${host}: ${code}${message !== undefined ? ` (${message})` : ""}`
  }
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

/**
 * The {@link ChatClient} of a lease: the resource's own client (built by
 * {@link chatClientFactory}), else one built here on first use from the resource's options
 * (cached per resource). An endpoint that cannot be read fails with class `fatal`. Used by the
 * `chat` and `judge` tasks.
 *
 * @since 0.7.0
 * @category clients
 */
export const clientOf = (lease: Lease<unknown>): Effect.Effect<ChatClient, ChatError> => {
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
 *   class `timeout` and counts against the resource's health;
 * - `cache`: the call cache of this task (`true`, a mode or `{ mode, ttl }`, see
 *   `CallCache.CacheOption`); absent: the run's cache setting (`--cache`, `run.cache`), off by
 *   default. The key is the exact request: the public identity of the pool's endpoints
 *   ({@link endpointIdentity}), the model, the messages, `temperature` and `maxTokens`, in the
 *   namespace of the pipeline's repeat, the visit and the study variant.
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
  readonly cache?: CallCache.CacheOption | undefined
}

/**
 * The resource options a chat endpoint reads ({@link endpointOf}), with their other spellings:
 * what `validate` and `run` compare a leased resource's option keys with (a key that is none of
 * them, nor `quota` nor a key a task's selector matches, draws a warning with a did-you-mean).
 *
 * @internal
 */
export const resourceOptionNames: ReadonlyArray<string> = [
  "baseUrl",
  "base_url",
  "apiUrl",
  "apiKey",
  "api_key",
  "apiKeyEnv",
  "api_key_env",
  "model",
  "headers"
]

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
  "requestTimeout",
  "cache"
]

/**
 * The option keys of the {@link chat} task itself (what a misplaced resource option such as
 * `maxTokens` is compared with).
 *
 * @internal
 */
export const taskOptionNames: ReadonlyArray<string> = knownOptions

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

const endpointKeys = new WeakMap<object, { readonly raw: unknown; readonly model: unknown; readonly key: string }>()

/**
 * The canonical JSON of a resource's {@link endpointIdentity}, what the call cache keys `chat`
 * and `judge` requests by, computed once per options object (and again only when its URL or
 * model changed), not once per cached attempt: it parses the URL.
 *
 * @internal
 */
export const endpointKeyOf = (options: Readonly<Record<string, unknown>>): string => {
  const raw = str(options, "baseUrl", "base_url", "apiUrl")
  const model = options["model"]
  const known = endpointKeys.get(options)
  if (known !== undefined && known.raw === raw && known.model === model) return known.key
  const key = canonicalJsonUnsafe(endpointIdentity(options))
  endpointKeys.set(options, { raw, model, key })
  return key
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
    ...(options.algorithm !== undefined ? { algorithm: options.algorithm } : {}),
    // cacheable; off unless the task or the run turns the cache on
    cache: options.cache ?? { mode: undefined },
    cacheKey: (input, env) => {
      const messages = messagesOf(input, system, template)
      if (Option.isNone(messages)) return Effect.succeed(undefined)
      const pool = options.resource ?? "llm"
      return Effect.map(env.resourceOptions(pool), (resources) => {
        const endpoints = Array.from(new Set(resources.map(endpointKeyOf))).sort()
        return {
          kind: "chat",
          pool,
          endpoints,
          model: model ?? null,
          messages: messages.value.map((m) => ({ role: m.role, content: m.content })),
          temperature: temperature ?? null,
          maxTokens: maxTokens ?? null,
          selector: selectorJson as Task.JsonObject
        }
      })
    }
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
          },
          // token and cost accounting: what the run prices the call by (see `Pricing`)
          model: c.model,
          ...((model ?? client.model) !== undefined ? { requestedModel: (model ?? client.model)! } : {}),
          ...(c.usage.estimated === true ? { estimated: true } : {}),
          ...(c.usage.costUsd !== undefined ? { costUsd: c.usage.costUsd } : {}),
          ...(c.rateLimit !== undefined ? { rateLimit: c.rateLimit } : {})
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
 * The public identity of an endpoint (a resource's options), what the call cache keys `chat`
 * requests by: `{ baseUrl, model }` where `baseUrl` (`baseUrl` / `base_url` / `apiUrl`) has
 * no `user:password@` and keeps only the query parameters of `Secrets.publicQueryParams`
 * (`api-version`, `deployment`, …), and `model` is the resource's default model (`null`:
 * none). Keys, key variables and headers are never part of it.
 *
 * @since 0.7.0
 * @category endpoint
 */
export const endpointIdentity = (
  options: Readonly<Record<string, unknown>>
): { readonly baseUrl: string | null; readonly model: string | null } => {
  const raw = str(options, "baseUrl", "base_url", "apiUrl")
  const model = typeof options["model"] === "string" ? options["model"] : null
  if (raw === undefined) return { baseUrl: null, model }
  let baseUrl: string
  try {
    const u = new URL(raw)
    u.username = ""
    u.password = ""
    for (const name of Array.from(u.searchParams.keys())) {
      if (!Secrets.publicQueryParams.has(name.toLowerCase())) u.searchParams.delete(name)
    }
    u.searchParams.sort()
    u.hash = ""
    baseUrl = u.toString().replace(/\/+$/, "")
  } catch {
    baseUrl = "(not a URL)"
  }
  return { baseUrl, model }
}

/**
 * Whether an error class is one {@link chat} reports as the endpoint's fault.
 *
 * @since 0.1.0
 * @category guards
 */
export const isEndpointFault = (errorClass: unknown): boolean =>
  isErrorClass(errorClass) && endpointFaultClasses.has(errorClass)

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * Whether `name` is a POSIX environment variable's name (`[A-Za-z_][A-Za-z0-9_]*`): what
 * `apiKeyEnv` / `api_key_env` must hold. Anything else (`${KEY}` expanded to the key itself, a
 * value) is refused, and never printed.
 *
 * @param name the text to check
 * @returns true when it is a variable's name
 * @since 0.11.0
 * @category guards
 */
export const isEnvName = (name: string): boolean => ENV_NAME.test(name)

/**
 * The credential problems of one resource's options, found before a run starts (what
 * `assay validate` and `assay run` check for every resource of every pool): a key
 * (`apiKey` / `api_key`) or the variable named by `apiKeyEnv` / `api_key_env` holding
 * whitespace or control characters (a key read from a file with its trailing newline: it
 * cannot be sent in a header, so it is refused, never trimmed silently); with `strictEnv`,
 * a variable named by `apiKeyEnv` that is unset or empty; a header value with a line break
 * or NUL; a `baseUrl` that is not an absolute http(s) URL. Each issue has the field path
 * under `path` (e.g. `pools.llm.resources[0].options.apiKeyEnv`) and names the variable,
 * never a value. `env` is the environment to read.
 *
 * @since 0.1.0
 * @category validation
 */
export const credentialIssues = (
  options: Readonly<Record<string, unknown>>,
  path: string,
  env: Readonly<Record<string, string | undefined>>,
  strictEnv: boolean
): ReadonlyArray<ConfigIssue> => {
  const issues: Array<ConfigIssue> = []
  const fix = (name: string) => `strip it, e.g. export ${name}="$(printf %s "$${name}" | tr -d '[:space:]')"`
  for (const k of ["apiKey", "api_key"]) {
    const v = options[k]
    if (typeof v === "string" && Secrets.hasWhitespaceOrControl(v)) {
      issues.push({ path: `${path}.${k}`, message: `the key holds whitespace or control characters (not shown)` })
    } else if (v !== undefined && v !== null && typeof v !== "string") {
      // a list or a table would be sent as its text: every call a 401
      issues.push({ path: `${path}.${k}`, message: `the key must be one string (it is ${Array.isArray(v) ? "a list" : `a ${typeof v}`}; not shown)` })
    }
  }
  for (const k of ["apiKeyEnv", "api_key_env"]) {
    const name = options[k]
    if (name !== undefined && name !== null && typeof name !== "string") {
      issues.push({ path: `${path}.${k}`, message: `the name of an environment variable must be one string (not shown)` })
      continue
    }
    if (typeof name !== "string" || name === "") continue
    // `apiKeyEnv: "${KEY}"` puts the key itself here: it must never be printed or stored
    if (!isEnvName(name)) {
      issues.push({
        path: `${path}.${k}`,
        message: `${k} takes the name of the environment variable that holds the key, not a value or a \${...} reference (what it holds is not shown)`,
        suggestion: `write the variable's bare name, e.g. ${k}: OPENAI_API_KEY`
      })
      continue
    }
    const value = env[name]
    if (value === undefined || value === "") {
      if (strictEnv) {
        issues.push({
          path: `${path}.${k}`,
          message: `environment variable ${name} (the key) is ${value === undefined ? "not set" : "empty"} (--strict-env)`,
          suggestion: `export ${name}=...`
        })
      }
    } else if (Secrets.hasWhitespaceOrControl(value)) {
      issues.push({
        path: `${path}.${k}`,
        message: `environment variable ${name} holds whitespace or control characters (a trailing newline?); its value is not shown`,
        suggestion: fix(name)
      })
    }
  }
  const headers = options["headers"]
  if (Predicate.isObject(headers)) {
    for (const [k, v] of Object.entries(headers)) {
      if (typeof v === "string" && /[\r\n\u0000]/.test(v)) {
        issues.push({ path: `${path}.headers.${k}`, message: `the value of header ${k} holds a line break or NUL (not shown)` })
      }
    }
  }
  for (const k of ["baseUrl", "base_url", "apiUrl"]) {
    const v = options[k]
    if (typeof v !== "string" || v === "") continue
    const parsed = completionsUrl(v)
    if (Either.isLeft(parsed)) issues.push({ path: `${path}.${k}`, message: parsed.left })
  }
  return issues
}
