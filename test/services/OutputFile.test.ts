/**
 * OutputFile: atomic writes beside the target, symbolic links followed (the link stays a link),
 * devices and FIFOs streamed instead of renamed over, `-` as standard output, temp files
 * removed on every exit path and stale ones (dead writers) swept by the next open.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { execFileSync, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import * as OutputFile from "../../src/services/OutputFile.js"
import { tmpDir } from "./ExportFixture.js"

const enc = (s: string) => new TextEncoder().encode(s)
const write = (path: string, text: string) => OutputFile.writeAll(path, enc(text))
/** Entries of `dir` that are temp files. */
const temps = (dir: string) => fs.readdirSync(dir).filter((n) => n.includes(".assay-tmp-"))
/** A pid that is certainly not alive: a child that has exited and been reaped. */
const deadPid = () => spawnSync("true").pid!

describe("OutputFile", () => {
  it.live("a new file and an existing file: written through a temp beside it, permission bits kept", () =>
    Effect.gen(function*() {
      const dir = tmpDir()
      const out = nodePath.join(dir, "out.jsonl")
      yield* write(out, "one\n")
      assert.strictEqual(fs.readFileSync(out, "utf8"), "one\n")
      fs.chmodSync(out, 0o640)
      const ino = fs.statSync(out).ino
      yield* write(out, "two\n")
      assert.strictEqual(fs.readFileSync(out, "utf8"), "two\n")
      assert.notStrictEqual(fs.statSync(out).ino, ino) // renamed over, not rewritten in place
      assert.strictEqual(fs.statSync(out).mode & 0o777, 0o640)
      assert.deepStrictEqual(fs.readdirSync(dir), ["out.jsonl"])
    }))

  it.live("a symbolic link: its target is replaced atomically, the link stays a link (relative, chained, dangling)", () =>
    Effect.gen(function*() {
      const dir = tmpDir()
      fs.mkdirSync(nodePath.join(dir, "real"))
      const target = nodePath.join(dir, "real", "data.jsonl")
      fs.writeFileSync(target, "old\n")
      fs.symlinkSync("real/data.jsonl", nodePath.join(dir, "link1"))
      fs.symlinkSync(nodePath.join(dir, "link1"), nodePath.join(dir, "link2"))
      yield* write(nodePath.join(dir, "link2"), "new\n")
      assert.isTrue(fs.lstatSync(nodePath.join(dir, "link1")).isSymbolicLink())
      assert.isTrue(fs.lstatSync(nodePath.join(dir, "link2")).isSymbolicLink())
      assert.strictEqual(fs.readFileSync(target, "utf8"), "new\n")
      assert.deepStrictEqual(temps(nodePath.join(dir, "real")), [])
      // a dangling link: its target is created, the link kept
      fs.symlinkSync("real/later.jsonl", nodePath.join(dir, "dangling"))
      yield* write(nodePath.join(dir, "dangling"), "created\n")
      assert.isTrue(fs.lstatSync(nodePath.join(dir, "dangling")).isSymbolicLink())
      assert.strictEqual(fs.readFileSync(nodePath.join(dir, "real", "later.jsonl"), "utf8"), "created\n")
      // a loop is refused
      fs.symlinkSync("loopB", nodePath.join(dir, "loopA"))
      fs.symlinkSync("loopA", nodePath.join(dir, "loopB"))
      const e = yield* Effect.flip(write(nodePath.join(dir, "loopA"), "x"))
      assert.match(e.message, /symbolic links/)
    }))

  it.live("a FIFO and a character device are streamed, never renamed over; a directory is refused", () =>
    Effect.gen(function*() {
      const dir = tmpDir()
      const fifo = nodePath.join(dir, "pipe")
      execFileSync("mkfifo", [fifo])
      const reader = spawn("cat", [fifo])
      let got = ""
      reader.stdout.on("data", (d) => (got += String(d)))
      const closed = new Promise<void>((r) => reader.on("close", () => r()))
      yield* write(fifo, "through the fifo\n")
      yield* Effect.promise(() => closed)
      assert.strictEqual(got, "through the fifo\n")
      assert.isTrue(fs.lstatSync(fifo).isFIFO())
      assert.deepStrictEqual(temps(dir), [])
      yield* write("/dev/null", "discarded")
      assert.isTrue(fs.statSync("/dev/null").isCharacterDevice())
      const e = yield* Effect.flip(write(dir, "x"))
      assert.match(e.message, /is a directory/)
    }))

  it("descriptor aliases are recognised", () => {
    for (const p of ["/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/1", "/proc/123/fd/4", "/proc/self/task/7/fd/1"]) {
      assert.isTrue(OutputFile.isDescriptorAlias(p), p)
    }
    for (const p of ["/dev/null", "/dev/shm/out.jsonl", "/proc/self/status", "/tmp/dev/stdout"]) {
      assert.isFalse(OutputFile.isDescriptorAlias(p), p)
    }
    // this process's own descriptors are written through the descriptor (a socket cannot be reopened)
    assert.strictEqual(OutputFile.ownDescriptor("/dev/stdout"), 1)
    assert.strictEqual(OutputFile.ownDescriptor("/dev/stderr"), 2)
    assert.strictEqual(OutputFile.ownDescriptor("/dev/fd/7"), 7)
    assert.strictEqual(OutputFile.ownDescriptor("/proc/self/fd/3"), 3)
    assert.strictEqual(OutputFile.ownDescriptor(`/proc/${process.pid}/fd/4`), 4)
    assert.strictEqual(OutputFile.ownDescriptor("/proc/1/fd/4"), process.pid === 1 ? 4 : undefined)
    assert.strictEqual(OutputFile.ownDescriptor("/dev/null"), undefined)
  })

  it.live("a failure or an interruption removes the temp file and leaves the target as it was", () =>
    Effect.gen(function*() {
      const dir = tmpDir()
      const out = nodePath.join(dir, "out.csv")
      fs.writeFileSync(out, "before\n")
      const failed = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
        const o = yield* OutputFile.open(out)
        assert.strictEqual(o.mode, "atomic")
        yield* o.write([enc("partial")])
        assert.deepStrictEqual(temps(dir), [nodePath.basename(o.temp!)])
        assert.strictEqual(o.temp, OutputFile.tempPath(fs.realpathSync(out), process.pid))
        return yield* Effect.fail("boom")
      })))
      assert.isTrue(Exit.isFailure(failed))
      assert.deepStrictEqual(fs.readdirSync(dir), ["out.csv"])
      assert.strictEqual(fs.readFileSync(out, "utf8"), "before\n")
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        const o = yield* OutputFile.open(out)
        yield* o.write([enc("partial")])
        return yield* Effect.never
      })))
      yield* Effect.sleep("50 millis")
      assert.strictEqual(temps(dir).length, 1)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(fs.readdirSync(dir), ["out.csv"])
      assert.strictEqual(fs.readFileSync(out, "utf8"), "before\n")
    }))

  it.live("stale temps of dead writers (and of this pid, not held) are swept; a live writer's temp is kept", () =>
    Effect.gen(function*() {
      const dir = tmpDir()
      const out = nodePath.join(dir, "out.jsonl")
      const dead = OutputFile.tempPath(out, deadPid())
      const deadN = `${OutputFile.tempPath(out, deadPid())}-2`
      const mine = OutputFile.tempPath(out, process.pid) // a previous process with a reused pid
      const legacy = nodePath.join(dir, `.out.jsonl.${deadPid()}.k3j2.tmp`)
      const live = OutputFile.tempPath(out, process.ppid) // the test runner's parent: alive
      const other = OutputFile.tempPath(nodePath.join(dir, "other.jsonl"), deadPid()) // another target's
      for (const p of [dead, deadN, mine, legacy, live, other]) fs.writeFileSync(p, "stale")
      yield* write(out, "fresh\n")
      assert.deepStrictEqual(
        fs.readdirSync(dir).sort(),
        [nodePath.basename(live), nodePath.basename(other), "out.jsonl"].sort()
      )
      // two writes of one target at once by one process: distinct temps, neither swept
      yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* OutputFile.open(out)
        const b = yield* OutputFile.open(out)
        assert.notStrictEqual(a.temp, b.temp)
        yield* a.write([enc("a")])
        yield* b.write([enc("b")])
        yield* a.commit
        yield* b.commit
      }))
      assert.strictEqual(fs.readFileSync(out, "utf8"), "b")
    }))

  it.live("a missing directory fails with OutputFileError naming the path", () =>
    Effect.gen(function*() {
      const dir = tmpDir()
      const e = yield* Effect.flip(write(nodePath.join(dir, "no", "such", "x.jsonl"), "x"))
      assert.strictEqual(e._tag, "OutputFileError")
      assert.match(e.message, /no\/such\/x\.jsonl/)
    }))
})
