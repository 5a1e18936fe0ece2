/**
 * The built-in `chat` task: one OpenAI-compatible chat completion per attempt, through a
 * leased resource of a pool (default pool `"llm"`).
 *
 * **The endpoint comes from the resource.** A resource's `options` name its endpoint:
 * `baseUrl` (the OpenAI base URL, e.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is
 * appended to its path and its query string kept, see `completionsUrl`), the key
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
 * inside a 200 → by its embedded code (`classOfEmbeddedError`); a 200 without text (the
 * content filter, a refusal) or a body that is not a chat completion → `invalid`; any other
 * 4xx → `fatal`. Latency (ms, from `Clock`) and token usage are reported to the lease
 * (`usage: { tokens, promptTokens, completionTokens }`), with what the answer's
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

// The implementation is in internal/chat.ts; this module is the public surface
// (what `import { Chat } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  ChatError,
  chat,
  chatClientFactory,
  defaultChatRetry,
  defaultHttpClient,
  endpointIdentity,
  isChatClient,
  makeChatClient
} from "./internal/chat.js"
export type {
  ChatClient,
  ChatClientFactoryOptions,
  ChatCompletion,
  ChatInput,
  ChatMessage,
  ChatOptions,
  ChatOutput,
  ChatRequest,
  ChatUsage,
  Endpoint,
  ProxySettings
} from "./internal/chat.js"
