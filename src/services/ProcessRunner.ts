/**
 * The subprocess port: run one command to completion, capture its output, and never leave a
 * process behind on a failure path.
 *
 * This module holds the contract (the {@link ProcessRunner} tag and its {@link RunOptions} /
 * {@link ProcessResult} shapes), the typed errors, the pure helpers used by the `shellRun`
 * built-in task (`substituteArgv`, `checkStringCommand`, `check`), and a
 * scripted test implementation ({@link layerTest}). The real implementation, on
 * `@effect/platform`'s `Command`, is `NodeProcessRunner` in `src/layers/NodeProcessRunner.ts`.
 *
 * @since 0.1.0
 */

// The implementation is in internal/processRunner.ts; this module is the public surface
// (what `import { ProcessRunner } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  check,
  ProcessFailed,
  ProcessRunner,
  ProcessSpawnError,
  ProcessTimeout,
  defaultMaxOutputBytes,
  defaultTimeout,
  layerTest,
  makeTest,
  valuePlaceholder
} from "./internal/processRunner.js"
export type {
  Invocation,
  ProcessCommand,
  ProcessResult,
  ProcessRunError,
  RunOptions,
  Script,
  ScriptReply
} from "./internal/processRunner.js"
