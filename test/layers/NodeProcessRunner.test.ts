import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Either, Exit, Fiber, Option, Schema, TestClock } from "effect"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { classify } from "../../src/domain/Errors.js"
import * as NodeProcessRunner from "../../src/layers/NodeProcessRunner.js"
import {
  check,
  checkArgvCommand,
  checkStringCommand,
  type Invocation,
  layerTest,
  ProcessFailed,
  type ProcessResult,
  ProcessRunner,
  ProcessSpawnError,
  ProcessTimeout,
  substituteArgv,
  summarize
} from "../../src/services/internal/processRunner.js"

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "proc")
const fixture = (name: string) => path.join(fixtures, name)

const tmpFile = (name: string) => path.join(os.tmpdir(), `assay-proc-${randomUUID()}-${name}`)

const run = (command: string | ReadonlyArray<string>, options?: Parameters<ProcessRunner["Type"]["run"]>[1]) =>
  Effect.flatMap(ProcessRunner, (runner) => runner.run(command, options)).pipe(
    Effect.provide(NodeProcessRunner.layer)
  )

const spawnFailure = (command: string | ReadonlyArray<string>, options?: Parameters<ProcessRunner["Type"]["run"]>[1]) =>
  Effect.flip(run(command, options)).pipe(
    Effect.flatMap((e) =>
      e._tag === "ProcessSpawnError" ? Effect.succeed(e) : Effect.dieMessage(`expected a spawn error, got ${e._tag}`)
    )
  )

/** Whether a pid is a live process: present in /proc and not a zombie (zombies linger in containers). */
const isAlive = (pid: number): boolean => {
  let stat: string
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch {
    return false
  }
  const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3)
  return state !== "Z" && state !== "X"
}

/** Pids of live processes whose environment holds `ASSAY_PROC_TOKEN=<token>`. */
const liveWithToken = (token: string): Array<number> => {
  const needle = `ASSAY_PROC_TOKEN=${token}`
  const out: Array<number> = []
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    let environ: string
    try {
      environ = fs.readFileSync(`/proc/${entry}/environ`, "utf8")
    } catch {
      continue
    }
    if (environ.split("\0").includes(needle) && isAlive(Number(entry))) out.push(Number(entry))
  }
  return out
}

/** Polls `cond` every 10 ms until it holds or `ms` pass; returns whether it held. */
const eventually = (cond: () => boolean, ms = 5_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + ms
    while (!cond()) {
      if (Date.now() > deadline) return false
      yield* Effect.sleep("10 millis")
    }
    return true
  })

const readPids = (file: string): Array<number> | undefined => {
  try {
    const pids = fs.readFileSync(file, "utf8").trim().split("\n").map(Number)
    return pids.every((n) => Number.isInteger(n) && n > 0) ? pids : undefined
  } catch {
    return undefined
  }
}

describe("substituteArgv / checkStringCommand", () => {
  it("replaces {value} as a plain substring in each element and leaves other braces", () => {
    const argv = ["jq", "{.a} | {value}", "--input={value}", "{}", "{name}"]
    const out = Either.getOrThrow(substituteArgv(argv, "x $1 {value}"))
    assert.deepStrictEqual(out, ["jq", "{.a} | x $1 {value}", "--input=x $1 {value}", "{}", "{name}"])
    assert.deepStrictEqual(argv[1], "{.a} | {value}")
  })

  it("JSON-encodes values that are not strings, and refuses non-JSON values", () => {
    assert.deepStrictEqual(Either.getOrThrow(substituteArgv(["{value}"], { b: 1, a: [true, null] })), [
      "{\"a\":[true,null],\"b\":1}"
    ])
    assert.deepStrictEqual(Either.getOrThrow(substituteArgv(["n={value}"], 42)), ["n=42"])
    assert.isTrue(Either.isLeft(substituteArgv(["{value}"], undefined)))
    // no placeholder: any value is accepted
    assert.deepStrictEqual(Either.getOrThrow(substituteArgv(["ls"], undefined)), ["ls"])
  })

  it("refuses a shell string containing {value}", () => {
    const refused = checkStringCommand("cat {value} | wc -l")
    assert.isTrue(Either.isLeft(refused))
    if (Either.isLeft(refused)) {
      assert.strictEqual(refused.left._tag, "ConfigError")
      assert.include(refused.left.message, "argv")
    }
    assert.deepStrictEqual(checkStringCommand("echo '{}' | jq ."), Either.right("echo '{}' | jq ."))
  })

  it("refuses an argv that puts {value} inside an interpreter's code, and accepts it as its own argument", () => {
    const refused: ReadonlyArray<[ReadonlyArray<string>, number]> = [
      [["sh", "-c", "echo {value}"], 2],
      [["/bin/bash", "-ec", "wc -c <<< {value}"], 2],
      [["bash", "--norc", "-c", "x={value}; echo $x"], 3],
      [["env", "LANG=C", "-i", "zsh", "-c", "print {value}"], 5],
      [["python3", "-c", "print('{value}')"], 2],
      [["python3.12", "-u", "-c", "print({value})"], 3],
      [["node", "-e", "console.log({value})"], 2],
      [["node", "--eval", "f({value})"], 2],
      [["perl", "-E", "say {value}"], 2],
      [["ruby", "-e", "p {value}"], 2],
      [["php", "-r", "echo {value};"], 2],
      [["pwsh", "-Command", "Write-Output {value}"], 2],
      [["cmd.exe", "/C", "echo {value}"], 2],
      [["awk", "{value} { print }", "file"], 1],
      [["awk", "-F,", "/{value}/"], 2],
      [["sed", "-e", "s/a/{value}/"], 2],
      [["sed", "s/{value}/b/", "in.txt"], 1],
      [["jq", ".a == {value}"], 1]
    ]
    for (const [argv, at] of refused) {
      const r = checkArgvCommand(argv)
      assert.isTrue(Either.isLeft(r), argv.join(" "))
      if (Either.isLeft(r)) {
        assert.strictEqual(r.left.issues[0]!.path, `command[${at}]`, argv.join(" "))
        assert.include(r.left.message, "would run as code")
      }
    }
    const accepted: ReadonlyArray<ReadonlyArray<string>> = [
      ["bash", "-c", "wc -c \"$1\"", "_", "{value}"],
      ["python3", "-c", "import sys; print(sys.argv[1])", "{value}"],
      ["python3", "score.py", "--input", "{value}"],
      ["node", "-e", "console.log(process.argv[1])", "{value}"],
      ["awk", "{ print }", "{value}"],
      ["sed", "-e", "s/a/b/", "{value}"],
      ["jq", "--arg", "v", "{value}", ".a == $v"],
      ["grep", "-c", "{value}", "file.txt"],
      ["sh", "-c", "echo hi"]
    ]
    for (const argv of accepted) assert.isTrue(Either.isRight(checkArgvCommand(argv)), argv.join(" "))
  })

  it("summarize quotes arguments that need it", () => {
    assert.strictEqual(summarize(["echo", "a b", "it's", "plain"]), `echo 'a b' 'it'"'"'s' plain`)
    assert.strictEqual(summarize("echo hi\necho there"), "echo hi\\necho there")
  })
})

describe("NodeProcessRunner", () => {
  it.live("argv form passes a hostile value as one literal argument", () =>
    Effect.gen(function*() {
      const hostile = `a b "c" 'd' $(touch /tmp/pwned-assay) \`id\` $HOME ; rm -rf / \n\t* {value} \\ end`
      const argv = Either.getOrThrow(substituteArgv(["/bin/sh", fixture("args.sh"), "--input", "{value}"], hostile))
      const result = yield* run(argv)
      assert.strictEqual(result.exitCode, 0)
      assert.deepStrictEqual(result.stdout.split("\0").slice(0, -1), ["--input", hostile])
      assert.isFalse(fs.existsSync("/tmp/pwned-assay"))
    }))

  it.live("string form runs through /bin/sh -c", () =>
    Effect.gen(function*() {
      const result = yield* run("printf '%s-%s' one two | tr a-z A-Z")
      assert.strictEqual(result.stdout, "ONE-TWO")
      assert.strictEqual(result.exitCode, 0)
    }))

  it.live("a non-zero exit is data; check turns it into ProcessFailed", () =>
    Effect.gen(function*() {
      const result = yield* run("echo oops >&2; exit 7")
      assert.strictEqual(result.exitCode, 7)
      assert.strictEqual(result.stderr, "oops\n")
      const failed = yield* Effect.flip(check(result))
      assert.instanceOf(failed, ProcessFailed)
      assert.strictEqual(failed.exitCode, 7)
      assert.strictEqual(failed.stderrTail, "oops\n")
      assert.strictEqual(failed.command, "echo oops >&2; exit 7")
      assert.strictEqual(classify(failed), "fatal")
      assert.strictEqual(classify(yield* Effect.flip(check(result, { errorClass: "retryable" }))), "retryable")
      assert.deepStrictEqual(yield* check({ ...result, exitCode: 0 }), { ...result, exitCode: 0 })
    }))

  it.live("a child killed by a signal reports 128 + n and the signal", () =>
    Effect.gen(function*() {
      const result = yield* run("kill -9 $$")
      assert.strictEqual(result.exitCode, 137)
      assert.strictEqual(result.signal, "SIGKILL")
    }))

  it.live("captures stdout and stderr together; a chatty child (> 64 KiB on stderr) does not block", () =>
    Effect.gen(function*() {
      const n = 300 * 1024
      const result = yield* run(["/bin/sh", fixture("chatty.sh"), String(n), "3"])
      assert.strictEqual(result.exitCode, 3)
      assert.strictEqual(result.stderr.length, n)
      assert.strictEqual(result.stdout.length, n)
      assert.match(result.stderr, /^e+$/)
      assert.match(result.stdout, /^o+$/)
      assert.isFalse(result.stdoutTruncated)
      assert.isFalse(result.stderrTruncated)
      assert.isAtLeast(result.durationMs, 0)
    }))

  it.live("maxOutputBytes caps each stream, drains the rest and flags it", () =>
    Effect.gen(function*() {
      const result = yield* run(["/bin/sh", fixture("chatty.sh"), String(200 * 1024), "0"], {
        maxOutputBytes: 1000
      })
      assert.strictEqual(result.exitCode, 0)
      assert.strictEqual(result.stdout, "o".repeat(1000))
      assert.strictEqual(result.stderr, "e".repeat(1000))
      assert.isTrue(result.stdoutTruncated)
      assert.isTrue(result.stderrTruncated)
      const exact = yield* run("printf abc", { maxOutputBytes: 3 })
      assert.strictEqual(exact.stdout, "abc")
      assert.isFalse(exact.stdoutTruncated)
    }))

  it.live("stdin is written and closed; without stdin the child sees end of file", () =>
    Effect.gen(function*() {
      const fed = yield* run(["cat"], { stdin: "line 1\nline 2 ✓\n" })
      assert.strictEqual(fed.stdout, "line 1\nline 2 ✓\n")
      const empty = yield* run(["cat"], { timeout: "10 seconds" })
      assert.strictEqual(empty.stdout, "")
      assert.strictEqual(empty.exitCode, 0)
      // a child that never reads a large input does not break the run
      const ignored = yield* run("exit 0", { stdin: "x".repeat(1024 * 1024) })
      assert.strictEqual(ignored.exitCode, 0)
    }))

  it.live("env is merged over process.env (or replaces it) and cwd is honoured", () =>
    Effect.gen(function*() {
      const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "assay-proc-cwd-")))
      const merged = yield* run(`pwd; printf '%s|%s|%s' "$ASSAY_X" "\${PATH:+has-path}" "\${ASSAY_GONE-unset}"`, {
        cwd: dir,
        env: { ASSAY_X: "x y", ASSAY_GONE: undefined }
      })
      assert.strictEqual(merged.stdout, `${dir}\nx y|has-path|unset`)
      const bare = yield* run(["/usr/bin/env"], { inheritEnv: false, env: { ONLY: "1" } })
      assert.strictEqual(bare.stdout, "ONLY=1\n")
      fs.rmSync(dir, { recursive: true })
    }))

  it.live("a program that does not exist, or a missing cwd, is a ProcessSpawnError", () =>
    Effect.gen(function*() {
      const missing = yield* spawnFailure(["/nonexistent/assay-no-such-program", "x"])
      assert.instanceOf(missing, ProcessSpawnError)
      assert.strictEqual(missing.reason, "ENOENT")
      assert.strictEqual(classify(missing), "fatal")
      const noCwd = yield* spawnFailure(["true"], { cwd: "/nonexistent/assay-dir" })
      assert.instanceOf(noCwd, ProcessSpawnError)
      const empty = yield* spawnFailure([])
      assert.strictEqual(empty.reason, "EmptyCommand")
      const notExecutable = tmpFile("not-executable.sh")
      fs.writeFileSync(notExecutable, "#!/bin/sh\necho hi\n", { mode: 0o644 })
      const denied = yield* spawnFailure([notExecutable])
      assert.strictEqual(denied.reason, "EACCES")
      assert.strictEqual(classify(denied), "fatal")
      fs.rmSync(notExecutable, { force: true })
    }))

  it.live("timeout kills a child that ignores SIGTERM: ProcessTimeout, and the child is gone", () =>
    Effect.gen(function*() {
      const pidFile = tmpFile("pid")
      const token = randomUUID()
      const startedAt = Date.now()
      const error = yield* Effect.flip(
        run(["/bin/sh", fixture("trap-term.sh"), pidFile], {
          timeout: "1 second",
          env: { ASSAY_PROC_TOKEN: token }
        })
      )
      const elapsed = Date.now() - startedAt
      assert.instanceOf(error, ProcessTimeout)
      assert.strictEqual(error.timeoutMs, 1000)
      assert.strictEqual(classify(error), "timeout")
      assert.strictEqual(error.stderrTail, "waiting\n")
      // the child would sleep 300 s: returning long before proves the scope did not wait on it
      assert.isBelow(elapsed, 30_000)
      const pids = readPids(pidFile)
      assert.isDefined(pids)
      assert.isTrue(yield* eventually(() => pids!.every((pid) => !isAlive(pid))))
      assert.isTrue(yield* eventually(() => liveWithToken(token).length === 0))
      fs.rmSync(pidFile, { force: true })
    }))

  it.live("interrupting a run kills every grandchild, even ones that ignore SIGTERM", () =>
    Effect.gen(function*() {
      const pidFile = tmpFile("tree")
      const token = randomUUID()
      const fiber = yield* Effect.fork(
        run(["/bin/sh", fixture("tree.sh"), pidFile, "stubborn"], { env: { ASSAY_PROC_TOKEN: token } })
      )
      assert.isTrue(yield* eventually(() => readPids(pidFile) !== undefined))
      const pids = readPids(pidFile)!
      assert.strictEqual(pids.length, 3)
      assert.isTrue(pids.every(isAlive))
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.isTrue(yield* eventually(() => pids.every((pid) => !isAlive(pid))))
      assert.deepStrictEqual(liveWithToken(token), [])
      fs.rmSync(pidFile, { force: true })
    }))

  it.live("a timeout that lands while the grandchildren run kills them too (string form)", () =>
    Effect.gen(function*() {
      const pidFile = tmpFile("tree-timeout")
      const token = randomUUID()
      const error = yield* Effect.flip(
        run(`/bin/sh '${fixture("tree.sh")}' '${pidFile}'`, { timeout: "1 second", env: { ASSAY_PROC_TOKEN: token } })
      )
      assert.instanceOf(error, ProcessTimeout)
      const pids = readPids(pidFile)
      assert.isDefined(pids)
      assert.isTrue(yield* eventually(() => pids!.every((pid) => !isAlive(pid))))
      assert.deepStrictEqual(liveWithToken(token), [])
      fs.rmSync(pidFile, { force: true })
    }))

  it.live("interruption right after start (or during it) leaves no process and never hangs", () =>
    Effect.gen(function*() {
      const token = randomUUID()
      // the shell and its sleeps ignore SIGTERM: a cleanup that only sent SIGTERM would hang here
      const command = ["/bin/sh", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"]
      const runner = yield* ProcessRunner
      // Interrupt after 0..39 scheduler yields: this sweeps the window in which the process
      // exists but its spawn has not been reported yet, as well as the moments just after.
      for (let k = 0; k < 40; k++) {
        const fiber = yield* Effect.fork(runner.run(command, { env: { ASSAY_PROC_TOKEN: token } }))
        for (let j = 0; j < k; j++) yield* Effect.yieldNow()
        const done = yield* Fiber.interrupt(fiber).pipe(Effect.timeout("10 seconds"), Effect.option)
        assert.isTrue(Option.isSome(done), `interrupt after ${k} yields did not complete`)
      }
      // and through Effect.timeout, which interrupts the run from outside
      for (const ms of [1, 4, 16]) {
        const r = yield* runner.run(command, { env: { ASSAY_PROC_TOKEN: token } }).pipe(
          Effect.timeout(Duration.millis(ms)),
          Effect.exit
        )
        assert.isTrue(Exit.isFailure(r))
      }
      assert.isTrue(yield* eventually(() => liveWithToken(token).length === 0))
    }).pipe(Effect.provide(NodeProcessRunner.layer)))

  it.live("a command that exits normally is not chased: its background process survives", () =>
    Effect.gen(function*() {
      const token = randomUUID()
      const result = yield* run("sleep 300 </dev/null >/dev/null 2>&1 & echo $!", { env: { ASSAY_PROC_TOKEN: token } })
      assert.strictEqual(result.exitCode, 0)
      const pid = Number(result.stdout.trim())
      assert.isTrue(isAlive(pid))
      process.kill(pid, "SIGKILL")
      assert.isTrue(yield* eventually(() => !isAlive(pid)))
    }))
})

describe("process errors", () => {
  it("round-trip through their Schema and keep their error class when encoded", () => {
    const timeout = new ProcessTimeout({ command: "sleep 9", timeoutMs: 500, stderrTail: "x" })
    const failed = new ProcessFailed({ command: "false", exitCode: 1, stderrTail: "" })
    const spawn = new ProcessSpawnError({ command: "nope", reason: "ENOENT", detail: "not found", errorClass: "fatal" })
    const encodedTimeout = Schema.encodeSync(ProcessTimeout)(timeout)
    assert.strictEqual(classify(encodedTimeout), "timeout")
    assert.deepStrictEqual(Schema.decodeUnknownSync(ProcessTimeout)(JSON.parse(JSON.stringify(encodedTimeout))), timeout)
    const encodedFailed = Schema.encodeSync(ProcessFailed)(failed)
    assert.strictEqual(classify(encodedFailed), "fatal")
    assert.deepStrictEqual(Schema.decodeUnknownSync(ProcessFailed)(JSON.parse(JSON.stringify(encodedFailed))), failed)
    assert.deepStrictEqual(Schema.decodeUnknownSync(ProcessSpawnError)(Schema.encodeSync(ProcessSpawnError)(spawn)), spawn)
    assert.include(failed.message, "exit code 1")
  })
})

describe("ProcessRunner.layerTest", () => {
  it.effect("answers from the script, records calls, caps output and enforces the timeout on TestClock", () =>
    Effect.gen(function*() {
      const calls: Array<Invocation> = []
      const layer = layerTest((invocation) => {
        calls.push(invocation)
        const argv = typeof invocation.command === "string" ? [invocation.command] : invocation.command
        if (argv[0] === "slow") return Effect.as(Effect.sleep("2 minutes"), {})
        if (argv[0] === "fail") return { exitCode: 2, stderr: "bad input" }
        return { stdout: "x".repeat(10) }
      })
      const results = yield* Effect.gen(function*() {
        const runner = yield* ProcessRunner
        const ok: ProcessResult = yield* runner.run(["ok", "a b"], { maxOutputBytes: 4 })
        const failed = yield* runner.run(["fail"]).pipe(Effect.flatMap((r) => check(r)), Effect.flip)
        const slowFiber = yield* Effect.fork(Effect.flip(runner.run(["slow"], { timeout: "30 seconds" })))
        yield* TestClock.adjust("31 seconds")
        const slow = yield* Fiber.join(slowFiber)
        return { ok, failed, slow }
      }).pipe(Effect.provide(layer))
      assert.strictEqual(results.ok.stdout, "xxxx")
      assert.isTrue(results.ok.stdoutTruncated)
      assert.strictEqual(results.ok.command, "ok 'a b'")
      assert.instanceOf(results.failed, ProcessFailed)
      assert.strictEqual(results.failed.stderrTail, "bad input")
      assert.instanceOf(results.slow, ProcessTimeout)
      assert.strictEqual(results.slow.timeoutMs, 30_000)
      assert.deepStrictEqual(calls.map((c) => c.command), [["ok", "a b"], ["fail"], ["slow"]])
    }))
})
