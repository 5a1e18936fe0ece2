/**
 * The after-the-fact report of one or more stores (`assay report STORE...`): which runs,
 * their status, pipeline counts by state, attempts and retries, latency percentiles, pool
 * resource health with per-resource attempts / retries / rate limits, tokens and cost (per
 * resource, pool and run, and in total; see `Pricing`), reported metrics,
 * recent errors, pipelines whose terminal repair failed, and the pipelines each run that died
 * (kill -9) had in flight (`inFlightAtStop`). The report of one run also counts its pipelines
 * that another run admitted again (their rows filed under that run now), as what they did under
 * it, and says them apart (`taken`). Several stores are merged:
 * pipelines are deduplicated by id with the rules of `Merge.beats`.
 *
 * Reports only read: every store is opened read-only, and a `running` run whose heartbeat is
 * older than `STALE_AFTER_MS` is *shown* as interrupted (stale) without being rewritten.
 *
 * @since 0.1.0
 */

// The implementation is in internal/report.ts; this module is the public surface
// (what `import { Report } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  accountingText,
  buildReport,
  renderText,
  reportPaths
} from "./internal/report.js"
export type {
  Accounting,
  ReportAccounting,
  ReportData,
  ReportInFlight,
  ReportMetric,
  ReportOptions,
  ReportResource,
  ReportRun,
  ReportTaken
} from "./internal/report.js"
