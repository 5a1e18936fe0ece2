/**
 * Loading a declarative experiment: a JSON, TOML or YAML file, or a TypeScript module whose
 * default export is `defineExperiment({...})`, turned into pools, a pipeline template, a seed
 * source and run settings.
 *
 * Loading is the one validation entry point shared by `assay validate`, `assay run` and every
 * shard process: it parses the file (parser chosen by suffix), expands `${VAR}` and
 * `${VAR:-default}` in every string value, decodes the result with the experiment Schema
 * (every problem at once, unknown keys with a did-you-mean suggestion), then checks what the
 * Schema cannot: `use:` targets, pool references (including a task's own declared resource),
 * algorithm names and options, resources, the source and the run settings. Everything is
 * reported in one `ConfigError` whose `issues` carry field paths
 * (`pools.apis.resources[1].capacity`). Loading never opens a store; of a `jsonl` dataset it
 * reads only a bounded head (see {@link LoadOptions}) to check keys and find integers beyond
 * 2^53 (`warnings`).
 *
 * @since 0.1.0
 */

// The implementation is in internal/experiment.ts; this module is the public surface
// (what `import { Experiment } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  defineExperiment,
  fromDefinition,
  load,
  read,
  runSettings,
  sourceSize
} from "./internal/experiment.js"
export type {
  Experiment,
  Format,
  LoadOptions,
  RawExperiment,
  SourceSpec
} from "./internal/experiment.js"
