/**
 * Whether a stored failure is the model endpoint's fault rather than a result of what was
 * tried: the endpoint refused the credentials (HTTP 401, 403, 407), does not know the model or
 * the path (HTTP 404), or could not be called as configured (no base URL, the key's variable
 * unset, no model given). A study does not settle a trial on such failures (see
 * `services/Study.ts`, `settleTrial`): every call of it would fail the same way whatever the
 * variant, so they say nothing about the variant.
 *
 * It reads the failure as the store keeps it (a pipeline row's `error_type` and
 * `error_message`), in the words `tasks/internal/chat.ts` writes (the `chat` and `judge`
 * tasks' `ChatError`):
 *
 * - `RESOURCE: HTTP 401: …` (a non-2xx answer), `RESOURCE: HTTP 200 with an error in its body
 *   (code 401): …` (an error object in a 2xx body);
 * - `chat endpoint of resource RESOURCE: …` (the endpoint cannot be read from the resource's
 *   options: `endpointOf`), `RESOURCE: no model given …`.
 *
 * Rate limits, 5xx answers, timeouts and refused connections are not here: they are retried,
 * and a pipeline failed by them failed after its retries (a result of the run as declared).
 * A 400 (a request the endpoint cannot serve, such as a prompt past the model's context) is a
 * result of the variant too.
 *
 * @internal
 */
import { count } from "./words.js"

/** The HTTP statuses that are the endpoint's (or its configuration's) fault, not the variant's. */
const STATUSES: ReadonlySet<number> = new Set([401, 403, 404, 407])

const HTTP = /^(.+?): HTTP (\d{3})(?: with an error in its body \(code (\d{3})\))?:/
const CONFIG = /^chat endpoint of resource (.+?): (.+)$/s
const NO_MODEL = /^(.+?): no model given\b/

/**
 * An endpoint fault: the resource it concerns and what it was, in words (`401`, `404`, `a
 * configuration fault (the environment variable KEY is not set)`).
 *
 * @internal
 */
export interface EndpointFault {
  readonly resourceId: string
  readonly what: string
}

/**
 * The endpoint fault a stored failure is, or `undefined` when it is not one (see the module
 * docs for the messages read).
 *
 * @param failure the stored error's type (the error's tag, `ChatError`) and message
 * @returns the fault, or `undefined`
 * @internal
 */
export const endpointFaultOf = (
  failure: { readonly errorType: string | null; readonly errorMessage: string | null }
): EndpointFault | undefined => {
  if (failure.errorType !== "ChatError" || failure.errorMessage === null) return undefined
  const m = failure.errorMessage
  const http = HTTP.exec(m)
  if (http !== null) {
    const status = Number(http[3] ?? http[2])
    return STATUSES.has(status) ? { resourceId: http[1]!, what: String(status) } : undefined
  }
  const config = CONFIG.exec(m)
  if (config !== null) return { resourceId: config[1]!, what: `a configuration fault [${config[2]!.trim()}]` }
  const noModel = NO_MODEL.exec(m)
  if (noModel !== null) return { resourceId: noModel[1]!, what: "a configuration fault [no model given]" }
  return undefined
}

/**
 * The endpoint faults of some failures in words, each kind once with how many failures had it:
 * `401 on resource a for 6 pipelines`, `404 on resource b for 2 pipelines; 401 on resource a
 * for 1 pipeline`, most frequent first (no parentheses: a reason is printed inside them).
 *
 * @param faults the faults, one per failed pipeline
 * @returns the phrase ("" for none)
 * @internal
 */
export const faultsText = (faults: ReadonlyArray<EndpointFault>): string => {
  const byKind = new Map<string, number>()
  for (const f of faults) {
    const k = `${f.what} on resource ${f.resourceId}`
    byKind.set(k, (byKind.get(k) ?? 0) + 1)
  }
  return [...byKind].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} for ${count(n, "pipeline")}`).join("; ")
}
