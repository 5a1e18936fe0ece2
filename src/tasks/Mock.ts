/**
 * Simulated work: built-in tasks that exercise retries, pools, leases and concurrency with no
 * network anywhere. They are what the docs, the examples and the runner's own tests use.
 *
 * - {@link echo}: returns its input;
 * - {@link delay}: waits on `Clock`, returns its input;
 * - {@link flaky}: fails its first `failTimes` attempts of each pipeline, then succeeds;
 * - {@link boom}: always fails, with the error class you ask for;
 * - {@link leaky}: takes a raw lease and never gives it back (for reclaim / `strictLeases`);
 * - {@link simulateLlm}: acquire → wait → report usage → return: the workhorse for pools and
 *   backoff.
 *
 * **Identity.** Every factory records its behaviour parameters in the task's `parameters`
 * (apart from the user's `config`), so `delay("1 second")` and `delay("2 seconds")` give
 * different pipeline ids, and a declarative override of `config` cannot erase them.
 *
 * **Definition errors.** Like `Task.make`, every factory throws a `ConfigError` (with field
 * paths) when given a malformed parameter or an unknown option key (a typo in a config file
 * must not be silently ignored): a definition is a programming mistake.
 *
 * **Time and randomness** come from Effect's `Clock` and from a `Random` seeded with the
 * attempt's `ctx.seed`, so tests run on `TestClock` and every run of the same pipeline draws
 * the same outcomes.
 *
 * @since 0.1.0
 */

// The implementation is in internal/mock.ts; this module is the public surface
// (what `import { Mock } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  InvalidValueError,
  boom,
  delay,
  echo,
  flaky,
  leaky,
  mockError,
  simulateLlm
} from "./internal/mock.js"
export type {
  BoomOptions,
  FlakyOptions,
  LeakyOptions,
  MockError,
  MockOptions,
  SimulateLlmOptions,
  SimulatedLlmOutput
} from "./internal/mock.js"
