/**
 * Chaos with pipelines that declare `control` (issue 17 with issue 13; `npm run test:chaos`,
 * not the CI file): C2 while the pipelines rewind. 60 pipelines `a → b → c` whose judge `b`
 * rewinds `a` once with a value (`a` is called again with `"<row>#1"`); three `assay runner`
 * processes; one is killed (-9) mid-run. The ground truth is the fake provider's log.
 *
 * After the run: the invariants of every scenario (`support/invariants.ts`: every pipeline
 * terminal, no call after the fault for a visit committed before it, repeats only within the
 * allowance snapshotted at the fault, peak in flight ≤ capacity, slots free within a TTL),
 * and those of the traversal: one rewind per pipeline in the ledger (the budget spent once,
 * whoever ran it), every pipeline's visits `a` ×2, `b` ×2, `c` ×1 committed once each, and no
 * attempt number used twice for a visit. Every claim mode: `ASSAY_CHAOS_CLAIMS=window` or
 * `per-task` runs the runners without block leases or without window claims (default: both,
 * the runner's default; `support/cluster.ts` `ClaimMode`).
 */
import { describe, expect, it } from "vitest"
import { usePostgres } from "../support/postgres.js"
import { blockLeases, type ExperimentDecl, windowClaims } from "./support/cluster.js"
import { assertInvariants, atFault, waitCommitted } from "./support/invariants.js"
import { withScene } from "./support/scenario.js"

const pg = usePostgres()

const experiment: ExperimentDecl = { rows: 60, resources: [{ id: "r1", capacity: 6 }], control: true }

const mode = blockLeases ? "window claims + block leases" : windowClaims ? "window claims" : "task claims"

describe("chaos: control pipelines on three assay runner processes", () => {
  it(`C2 (control, ${mode}): kill -9 of one runner while pipelines rewind: budget spent once, no committed visit called again, no attempt number reused`, async () => {
    await withScene(pg, "c2control", { experiment }, async ({ cluster, provider }) => {
      const submitter = cluster.submit(20)
      // a good part of the run (checkpoints: a#1, b#1 and c per pipeline once done; a rewind
      // deletes a#0's)
      await waitCommitted(cluster, experiment.rows)
      const snap = await atFault(cluster, provider, () => cluster.kill9(1))
      const run = await submitter.done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity: { r1: 6 }, snapshots: [snap] })
      // every visit that calls was called: a, a#1, c per pipeline
      expect(out.keys).toBe(experiment.rows * 3)
      // the ledger: one rewind per pipeline (its budget spent once, whoever ran it)
      const ledger = cluster.sql("SELECT pipeline_id, count(*) FROM assay_handoffs GROUP BY 1 HAVING count(*) <> 1")
      expect(ledger, "one ledger row per pipeline").toBe("")
      expect(cluster.sql("SELECT count(*) FROM assay_handoffs").trim()).toBe(String(experiment.rows))
      // the visits' outputs, once each: (a, 0) (history since the rewind), (a, 1), (b, 1), (c, 0)
      const visits = cluster.sql(
        "SELECT pipeline_id FROM assay_artifacts WHERE seq BETWEEN 0 AND 2 GROUP BY 1 HAVING array_agg(seq || '#' || visit || ':' || active ORDER BY seq, visit) <> ARRAY['0#0:0', '0#1:1', '1#1:1', '2#0:1']"
      )
      expect(visits, "outputs a#0 (inactive), a#1, b#1, c#0 per pipeline").toBe("")
      const reused = cluster.sql(
        "SELECT pipeline_id, seq, visit, attempt_no FROM assay_attempts GROUP BY 1, 2, 3, 4 HAVING count(*) > 1"
      )
      expect(reused, "no attempt number used twice for a visit").toBe("")
      const traversals = cluster.sql("SELECT count(*) FROM assay_pipelines WHERE traversal IS NULL").trim()
      expect(traversals, "every pipeline has its traversal state").toBe("0")
      console.log(JSON.stringify({ scenario: "C2-control", mode, heldAtFault: snap.heldSlots, ...out }))
    })
  }, 300_000)
})
