/**
 * The same experiment as delay.json, as a TypeScript module: the default export is the
 * definition. Tasks may be given as values (`use: Mock.delay("20 millis")`) or by name.
 * Everything comes from the package entry (`assay`, which resolves to src/index.ts through
 * package.json `exports`).
 */
import { Config, Mock } from "assay"

export default Config.defineExperiment({
  run: { store: "../../.tmp/runs/delay-ts.db", concurrency: 4, label: "${LABEL:-demo}" },
  pools: {
    apis: {
      algorithm: { name: "backoff", cap: "2 seconds" },
      resources: [{ id: "key-a", capacity: 2, options: { apiKey: "${API_KEY:-}" } }, { id: "key-b", capacity: 2 }]
    }
  },
  pipeline: {
    name: "demo",
    tasks: [
      { use: Mock.delay("20 millis") },
      { use: "simulateLlm", options: { resource: "apis", latency: "10 millis" }, retry: { maxAttempts: 3, base: "10 millis" } }
    ]
  },
  source: { range: { n: 8 } }
})
