/**
 * The same experiment as fanout.yaml, as a TypeScript module whose fanout is built in code
 * with `Fanout.fanout(...)`: it has the same pipeline ids as the JSON/TOML/YAML files (the
 * test suite checks it). `{ use: "fanout", tasks: [...] }` works here too.
 */
import { Config, Fanout, Mock, Task } from "assay"

const judge = (name: string, options: Mock.SimulateLlmOptions) =>
  Task.withOverrides(Mock.simulateLlm(options), { name })

export default Config.defineExperiment({
  run: { store: "../../.tmp/runs/fanout-ts.db", concurrency: 4 },
  pools: {
    apis: { resources: [{ id: "key-a", capacity: 2 }, { id: "key-b", capacity: 2 }] }
  },
  pipeline: {
    name: "judges-demo",
    tasks: [
      { use: "echo", name: "prepare" },
      {
        use: Fanout.fanout(
          judge("judge-a", { resource: "apis", latency: "10 millis" }),
          judge("judge-b", { resource: "apis", latency: "20 millis", tokens: 64 }),
          judge("judge-c", { resource: "apis", latency: "10 millis", failRate: 0.3 }),
          { name: "judges", onError: "collect" }
        )
      }
    ]
  },
  source: { range: { n: 6 } }
})
