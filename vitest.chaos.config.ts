import { defineConfig } from "vitest/config"

/**
 * `npm run test:chaos`: the whole chaos suite of issue 17 (research/distributed.md §7):
 * `test/chaos/ci.test.ts` (C1, C2, C5 with lock rows, C6, also part of `npm test`'s
 * integration group), `test/chaos/full.chaos.ts` (C3, C4, C5 with advisory locks, C7, C8,
 * C9), `test/chaos/control.chaos.ts` and `test/chaos/runner-close.chaos.ts` (a runner's stuck
 * close ended by its 30 s deadline). Each file starts its own PostgreSQL and
 * spawns `bin/assay runner` processes, so `dist/` is brought up to date first; one file at a
 * time (the scenarios measure a machine that should not be busier than it is).
 */
const conditions = ["assay-source", "module", "node", "development|production"]

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    include: ["test/chaos/**/*.test.ts", "test/chaos/**/*.chaos.ts"],
    testTimeout: 300_000,
    hookTimeout: 120_000,
    pool: "forks",
    fileParallelism: false,
    globalSetup: ["./test/support/tempRoot.ts", "./test/support/buildDist.ts"]
  }
})
