// Parameters a cut left outside the graph (state/unreached.ts): named by no leaf, listed in a ghost's cut;
// search finds them, and the details panel gets a leaf record for them.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { search } from "../src/features/search/state";
import type { GraphPayload } from "../src/payload";
import { paramNode, unreachedParams, unreachedText } from "../src/state/unreached";

const leaf = (id: string, name: string) => ({
  id, kind: "leaf" as const, op: "", label: name, module: "b0", call: "b0", names: [name], shape: null, dtype: "float32",
  requires_grad: true, saved: [], value: null,
});
const payload: GraphPayload = {
  version: 1,
  nodes: [leaf("n1", "b0.lora_A.weight"), { ...leaf("r", ""), kind: "root", names: [] }],
  edges: [{ source: "n1", target: "r", output_nr: 0, input_nr: 0, shape: null }],
  calls: [{ id: "b0", path: "b0", type: "Block", parent: "", index: 0, size: 1 }, { id: "b1", path: "b1", type: "Block", parent: "", index: 1, size: 0 }],
  ghosts: [{ id: "g0", kind: "detached", label: "detach()", names: [], shape: [2], source: null, output_nr: 0, targets: [], call: "b1",
             where: "b1.attn", line: "cell [3], line 7", cut: ["b0.lora_A.weight", "b1.lora_A.weight", "b1.lora_B.weight"] }],
  meta: { torch_version: "", captured: true, notes: [], num_nodes: 2, num_edges: 1 },
};

test("unreached: cut names no leaf carries, found by search, shown as a leaf outside the graph", () => {
  assert.deepEqual([...unreachedParams(payload).keys()], ["b1.lora_A.weight", "b1.lora_B.weight"]); // b0's is a leaf
  const hits = search(payload, "lora_a").hits;
  assert.deepEqual(hits.map((h) => h.id), ["n1", "p:b1.lora_A.weight"]);
  assert.equal(hits[1].key, "g:g0"); // drawn as its cut
  assert.match(hits[1].label, /^b1\.lora_A\.weight · no path to the loss \(cut in b1\.attn\)$/);
  const n = paramNode(payload, "p:b1.lora_B.weight");
  assert.equal(n?.kind, "leaf");
  assert.deepEqual(n?.names, ["b1.lora_B.weight"]);
  assert.equal(paramNode(payload, "p:b0.lora_A.weight"), undefined); // in the graph: its own node
  assert.equal(unreachedText(payload.ghosts[0]), "not in the loss's graph: its path was cut by detach() in b1.attn at cell [3], line 7");
  assert.equal(unreachedParams({ ...payload, ghosts: undefined as never }).size, 0);
});
