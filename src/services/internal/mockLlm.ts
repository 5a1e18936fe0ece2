/**
 * Internal helpers of `MockLlm` (issue 12 §8: not reachable from the package entry): the
 * email section of a prompt, the OpenAI-shaped error body and the 429 of each rate-limit signal.
 */
import { closest } from "../../domain/internal/suggest.js"
import type { RateLimitSignal } from "../MockLlm.js"

/**
 * The part of a prompt that holds the email: the text between the lines `--- email ---` and
 * `--- end of email ---` when present (the shape `buildPrompt` in examples/spam-eval writes),
 * otherwise the whole text.
 */
export const emailSection = (prompt: string): string => {
  const start = prompt.indexOf("--- email ---")
  if (start < 0) return prompt
  const from = start + "--- email ---".length
  const end = prompt.indexOf("--- end of email ---", from)
  return end < 0 ? prompt.slice(from) : prompt.slice(from, end)
}

/** An OpenAI-shaped error body: `{ error: { message, type, code } }` for an HTTP `status`. */
export const errorBody = (status: number, message: string) => ({
  error: {
    message,
    type: status === 429
      ? "rate_limit_exceeded"
      : status === 401
      ? "invalid_request_error"
      : status >= 500
      ? "server_error"
      : "invalid_request_error",
    code: status === 429 ? "rate_limit_exceeded" : status === 401 ? "invalid_api_key" : null
  }
})

/**
 * OpenAI's 404 for a model that does not exist (`code: "model_not_found"`, `param: "model"`),
 * naming the `known` model ids and, for a near miss, the closest one.
 */
export const unknownModelBody = (model: string, known: ReadonlyArray<string>) => {
  const near = closest(model, known)
  return {
    error: {
      message: `The model "${model}" does not exist on this server.${near === undefined ? "" : ` Did you mean "${near}"?`} Known models: ${
        known.join(", ")
      }.`,
      type: "invalid_request_error",
      param: "model",
      code: "model_not_found"
    }
  }
}

/**
 * The body and headers of a 429 that names a wait of `seconds` in the form `signal` (see
 * `RateLimitSignal`); `nowMs` dates the absolute forms.
 */
export const throttled = (
  signal: RateLimitSignal,
  seconds: number,
  nowMs: number
): { readonly body: unknown; readonly headers: Record<string, string> } => {
  const plain = errorBody(429, "throttled")
  switch (signal) {
    case "retry-after":
      return { body: plain, headers: { "retry-after": String(seconds) } }
    case "retry-after-ms":
      return { body: plain, headers: { "retry-after-ms": String(seconds * 1000) } }
    case "http-date":
      return { body: plain, headers: { "retry-after": new Date(nowMs + seconds * 1000).toUTCString() } }
    case "epoch":
      return { body: plain, headers: { "retry-after": String(Math.ceil(nowMs / 1000) + seconds) } }
    case "reset-requests":
      return {
        body: plain,
        headers: { "x-ratelimit-reset-requests": goDuration(seconds), "x-ratelimit-remaining-requests": "0", "x-ratelimit-limit-requests": "60" }
      }
    case "reset-tokens":
      return {
        body: plain,
        headers: { "x-ratelimit-reset-tokens": goDuration(seconds), "x-ratelimit-remaining-tokens": "0", "x-ratelimit-limit-tokens": "10000" }
      }
    case "anthropic":
      return {
        body: { type: "error", error: { type: "rate_limit_error", message: "Number of requests has exceeded your rate limit" } },
        headers: {
          "anthropic-ratelimit-requests-reset": new Date(Math.ceil(nowMs / 1000) * 1000 + seconds * 1000).toISOString(),
          "anthropic-ratelimit-requests-remaining": "0"
        }
      }
    case "body-message":
      return {
        body: errorBody(
          429,
          `Rate limit reached for mock-spam-1 on requests per min (RPM): Limit 60, Used 60, Requested 1. Please try again in ${goDuration(seconds)}.`
        ),
        headers: {}
      }
    case "body-field":
      return { body: { error: { ...plain.error, retry_after: seconds } }, headers: {} }
    case "google":
      return {
        body: {
          error: {
            code: 429,
            message: "Resource has been exhausted (e.g. check quota).",
            status: "RESOURCE_EXHAUSTED",
            details: [{ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: `${seconds}s` }]
          }
        },
        headers: {}
      }
    case "none":
      return { body: plain, headers: {} }
  }
}

/** Seconds as Go's `time.Duration.String()` writes them: `3s`, `6m0s`, `24h0m0s`. */
const goDuration = (seconds: number): string => {
  const h = Math.floor(seconds / 3600)
  const m = Math.floor((seconds % 3600) / 60)
  const s = seconds % 60
  return `${h > 0 ? `${h}h` : ""}${h > 0 || m > 0 ? `${m}m` : ""}${s}s`
}
