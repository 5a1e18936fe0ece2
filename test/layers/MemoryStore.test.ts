import { Effect, Layer } from "effect"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { storeContract } from "./StoreContract.js"

storeContract("MemoryStore", () => {
  const faults: MemoryStore.MemoryStoreFaults = { failWrites: false }
  return {
    layer: (options = {}, backend = ArtifactBackends.layerInline) =>
      MemoryStore.layerWith({ ...options, faults }).pipe(Layer.provide(backend)),
    injectWriteFailure: (on) => Effect.sync(() => {
      faults.failWrites = on
    })
  }
})
