/**
 * Running a test probe as another user: file permissions do not bind root, so a test that checks
 * what an ordinary user can read or write runs its probe as `nobody` (uid/gid 65534) in a child
 * process when this one is root.
 */
import { spawnSync, type SpawnSyncReturns } from "node:child_process"
import * as NodePath from "node:path"
import { program } from "./program.js"

/** The uid and gid of `nobody`. */
export const nobody = 65534

/** Whether this process runs as root. */
export const asRoot = process.getuid?.() === 0

/** Whether this process can switch to `nobody`: it is root and the user exists with uid 65534. */
export const hasNobody = asRoot &&
  spawnSync("id", ["-u", "nobody"], { encoding: "utf8" }).stdout.trim() === String(nobody)

/**
 * Runs `test/support/<probe>` as `nobody` (bundled by {@link program}, on plain node), from the
 * project root, with a minimal environment (PATH; HOME and TMPDIR `/tmp`, which every user can
 * reach). Returns the child's result; its last stdout line is the probe's JSON answer
 * ({@link lastLine}).
 */
export const runProbeAsNobody = (probe: string, args: ReadonlyArray<string>): SpawnSyncReturns<string> =>
  spawnSync(process.execPath, [program(`test/support/${probe}`), ...args], {
    cwd: NodePath.join(import.meta.dirname, "..", ".."),
    uid: nobody,
    gid: nobody,
    env: { PATH: process.env["PATH"] ?? "", HOME: "/tmp", TMPDIR: "/tmp" },
    encoding: "utf8"
  })

/** The last line of a probe's stdout (its JSON answer). */
export const lastLine = (child: SpawnSyncReturns<string>): string => child.stdout.trim().split("\n").pop() ?? ""
