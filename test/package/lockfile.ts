/**
 * A package-lock.json for a temporary project that depends on a packed assay tarball, built
 * from the checkout's own lock: every package the tarball (and the few extra packages the test
 * asks for) needs, at the checkout's versions and integrity hashes. `npm ci --offline` then
 * installs it from npm's cache alone (the checkout's `npm ci` filled it), with no registry
 * request: npm needs a registry's package documents only to resolve version ranges, and a lock
 * has none left to resolve.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"

interface LockEntry {
  readonly version?: string
  readonly dependencies?: Record<string, string>
  readonly optionalDependencies?: Record<string, string>
  readonly peerDependencies?: Record<string, string>
  readonly peerDependenciesMeta?: Record<string, { readonly optional?: boolean }>
  readonly [key: string]: unknown
}

interface Lock {
  readonly packages: Record<string, LockEntry>
}

/** The lock path where `name`, required from the package at `from`, is installed. */
const locate = (packages: Lock["packages"], from: string, name: string): string | undefined => {
  for (let base = from; ; base = base.slice(0, Math.max(0, base.lastIndexOf("/node_modules/")))) {
    const candidate = base === "" ? `node_modules/${name}` : `${base}/node_modules/${name}`
    if (packages[candidate] !== undefined) return candidate
    if (base === "") return undefined
  }
}

/**
 * The lock of a project whose `package.json` has `dependencies` = `{ assay: "file:<tarball>",
 * ...extra }` (`extra`: name → exact version, taken from the checkout's lock).
 */
export const projectLock = (options: {
  readonly checkoutLock: string
  readonly tarball: string
  readonly assayPackageJson: LockEntry & { readonly bin?: Record<string, string> }
  readonly extra: ReadonlyArray<string>
}): { readonly lock: object; readonly dependencies: Record<string, string> } => {
  const source = JSON.parse(fs.readFileSync(options.checkoutLock, "utf8")) as Lock
  const packages = source.packages
  const keep = new Set<string>()
  const visit = (from: string, deps: Record<string, string> | undefined, optional: ReadonlySet<string>) => {
    for (const name of Object.keys(deps ?? {})) {
      const at = locate(packages, from, name)
      if (at === undefined) {
        if (optional.has(name)) continue
        throw new Error(`the checkout's lock has no ${name} (needed by ${from || "the project"})`)
      }
      if (keep.has(at)) continue
      keep.add(at)
      const entry = packages[at]!
      const optionalPeers = new Set(
        Object.entries(entry.peerDependenciesMeta ?? {}).filter(([, m]) => m.optional === true).map(([n]) => n)
      )
      const optionalDeps = new Set(Object.keys(entry.optionalDependencies ?? {}))
      visit(at, entry.dependencies, new Set())
      visit(at, entry.optionalDependencies, optionalDeps)
      visit(at, entry.peerDependencies, optionalPeers)
    }
  }
  const assay = options.assayPackageJson
  const extraDeps = Object.fromEntries(options.extra.map((name) => {
    const entry = packages[`node_modules/${name}`]
    if (entry?.version === undefined) throw new Error(`the checkout's lock has no ${name}`)
    return [name, entry.version]
  }))
  visit("node_modules/assay", { ...assay.dependencies, ...assay.peerDependencies }, new Set())
  visit("", extraDeps, new Set())
  const dependencies = { assay: `file:${options.tarball}`, ...extraDeps }
  const integrity = `sha512-${crypto.createHash("sha512").update(fs.readFileSync(options.tarball)).digest("base64")}`
  const out: Record<string, object> = {
    "": { name: "assay-user", dependencies },
    "node_modules/assay": {
      version: assay.version,
      resolved: `file:${options.tarball}`,
      integrity,
      license: assay["license"],
      dependencies: assay.dependencies,
      peerDependencies: assay.peerDependencies,
      bin: assay.bin,
      engines: assay["engines"]
    }
  }
  for (const at of [...keep].sort()) {
    if (at === "node_modules/assay") continue
    const { dev: _dev, peer: _peer, devOptional: _devOptional, ...entry } = packages[at]!
    out[at] = entry
  }
  return { lock: { name: "assay-user", lockfileVersion: 3, requires: true, packages: out }, dependencies }
}
