/**
 * An OTLP/HTTP JSON traces receiver on 127.0.0.1 (a port of its own) that keeps every span it
 * is sent in memory: what the span-export tests read instead of a real collector.
 */
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** One received span: its name, ids, and its attributes (string, number and boolean values). */
export interface ReceivedSpan {
  readonly name: string
  readonly spanId: string
  /** The parent's span id; absent for a root span. */
  readonly parentSpanId: string | undefined
  readonly attributes: Readonly<Record<string, unknown>>
  readonly serviceName: unknown
}

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean }
const valueOf = (v: AnyValue): unknown =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.doubleValue ?? v.boolValue
const attributesOf = (list: ReadonlyArray<{ key: string; value: AnyValue }> | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]))

/**
 * Starts the receiver in the current scope: its base URL (`http://127.0.0.1:PORT`), the spans
 * received so far, and the request headers of each export.
 */
export const otlpReceiver = Effect.acquireRelease(
  Effect.async<{
    readonly server: http.Server
    readonly baseUrl: string
    readonly spans: Array<ReceivedSpan>
    readonly headers: Array<http.IncomingHttpHeaders>
  }>((resume) => {
    const spans: Array<ReceivedSpan> = []
    const headers: Array<http.IncomingHttpHeaders> = []
    const server = http.createServer((req, res) => {
      let body = ""
      req.on("data", (d: Buffer) => (body += d.toString()))
      req.on("end", () => {
        if (req.url === "/v1/traces") {
          headers.push(req.headers)
          const json = JSON.parse(body) as {
            resourceSpans: Array<{
              resource?: { attributes?: Array<{ key: string; value: AnyValue }> }
              scopeSpans: Array<{
                spans: Array<{
                  name: string
                  spanId: string
                  parentSpanId?: string
                  attributes?: Array<{ key: string; value: AnyValue }>
                }>
              }>
            }>
          }
          for (const rs of json.resourceSpans) {
            const serviceName = attributesOf(rs.resource?.attributes)["service.name"]
            for (const ss of rs.scopeSpans) {
              for (const s of ss.spans) {
                spans.push({
                  name: s.name,
                  spanId: s.spanId,
                  parentSpanId: s.parentSpanId === undefined || s.parentSpanId === "" ? undefined : s.parentSpanId,
                  attributes: attributesOf(s.attributes),
                  serviceName
                })
              }
            }
          }
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resume(Effect.succeed({ server, baseUrl: `http://127.0.0.1:${port}`, spans, headers }))
    })
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
    })
)
