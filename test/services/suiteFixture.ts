/**
 * Test fixtures for suites: an in-memory {@link SuiteCatalog} over the `Store` in context (the
 * contract of `SuiteCatalog`: definition digests refused when changed, membership facts upserted
 * field by field) and the layers of a suite run on a `MemoryStore`.
 */
import { Effect, Layer } from "effect"
import { ConfigError, StoreUnavailable } from "../../src/domain/Errors.js"
import type { RunId } from "../../src/domain/Ids.js"
import { readOnlyView } from "../../src/domain/TaskStore.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import {
  type MemberRecord,
  type MembershipRecord,
  SuiteCatalog,
  type SuiteCatalogService
} from "../../src/services/SuiteCatalog.js"

export interface FakeCatalog extends SuiteCatalogService {
  /** Every recordMembership call, in order. */
  readonly calls: Array<{ readonly experimentId: string; readonly facts: Record<string, unknown> }>
}

/**
 * An in-memory catalog of suite `suiteId` (layout combined, root `root`); with `failAfter`, every
 * `recordMembership` call after that many fails with `StoreUnavailable` (a broken catalog).
 */
export const fakeCatalog = (suiteId: string, root = "/suite-root", failAfter = Infinity) =>
  Layer.effect(
    SuiteCatalog,
    Effect.gen(function*() {
      const store = yield* Store
      const members = new Map<string, MemberRecord>()
      const membership = new Map<string, MembershipRecord>()
      const calls: FakeCatalog["calls"] = []
      const catalog: FakeCatalog = {
        suiteId,
        layout: "combined",
        root,
        calls,
        outputDirOf: () => root,
        registerMembers: (ms, now) =>
          Effect.suspend(() => {
            for (const m of ms) {
              const known = members.get(m.experimentId)
              if (known !== undefined && known.definitionDigest !== m.definitionDigest) {
                return Effect.fail(
                  new ConfigError({
                    message: `experiments.${m.experimentId}: definition changed`,
                    issues: [{ path: `experiments.${m.experimentId}`, message: "definition changed" }]
                  })
                )
              }
            }
            for (const m of ms) if (!members.has(m.experimentId)) members.set(m.experimentId, { ...m, createdAt: now })
            return Effect.void
          }),
        members: Effect.sync(() => [...members.values()]),
        recordMembership: (runId: RunId, experimentId, facts, now) =>
          calls.length >= failAfter
            ? Effect.fail(new StoreUnavailable({ message: "the catalog is gone" }))
            : Effect.sync(() => {
            calls.push({ experimentId, facts: { ...facts } })
            const key = `${runId}\u0000${experimentId}`
            const prev: MembershipRecord = membership.get(key) ?? {
              runId,
              experimentId,
              selected: false,
              admitted: 0,
              sourceExhausted: false,
              sourceError: null,
              limitReached: false,
              updatedAt: now
            }
            membership.set(key, { ...prev, ...facts, updatedAt: now })
          }),
        membership: (runId) =>
          Effect.sync(() => [...membership.values()].filter((m) => runId === undefined || m.runId === runId)),
        view: () => Effect.succeed(readOnlyView(store))
      }
      return catalog
    })
  )

/** Store + pools + catalog + runner for a suite on a MemoryStore. */
export const suiteEnv = (
  suiteId: string,
  pools: ReadonlyArray<Pool.PoolConfig> = [],
  options: Runner.RunOptions = {},
  failAfter = Infinity
) => {
  const base = Layer.mergeAll(MemoryStore.layer(), Pool.layer(pools))
  return Layer.provideMerge(
    Layer.merge(Runner.layer({ handleSignals: false, ...options }), fakeCatalog(suiteId, "/suite-root", failAfter)),
    base
  )
}
