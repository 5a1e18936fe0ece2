/**
 * The progress display of `assay run`: a scoped fiber that samples a run's live figures
 * ({@link LiveStats}, from its `RunHandle`) and renders done / total (when the source size is
 * known), rate, ETA, failures, interrupted pipelines, retries waiting, attempts in flight and
 * admitted pipelines.
 *
 * - on a terminal: one line redrawn in place (`\r` + ANSI "erase line") every 200 ms, cut to
 *   the terminal's width, ended with a newline when the scope closes;
 * - otherwise (piped, a log file): plain lines, never cut, the first after 1 s and then at
 *   doubling gaps up to 10 s, and a last one when the scope closes;
 * - `quiet`: nothing.
 *
 * No progress library is installed (none of `cli-progress`, `ora`, `log-update` is in
 * node_modules), so the line is drawn with two ANSI control sequences. Time comes from
 * `Clock`, so `TestClock` drives it in tests.
 *
 * @since 0.1.0
 */

// The implementation is in internal/progress.ts; this module is the public surface
// (what `import { Progress } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  renderProgress,
  stderrSink,
  track
} from "./internal/progress.js"
export type {
  ProgressOptions,
  ProgressView
} from "./internal/progress.js"
