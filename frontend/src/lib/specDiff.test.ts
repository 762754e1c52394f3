import { describe, expect, it } from "vitest";
import { flatten, specDiff } from "./specDiff";

describe("flatten", () => {
  it("turns nested objects into dotted paths with JSON leaves", () => {
    expect(flatten({ a: { b: 1, c: "x" }, d: [1, 2], e: null, f: {} })).toEqual({ "a.b": "1", "a.c": '"x"', d: "[1,2]", e: "null", f: "{}" });
  });
});

describe("flatten of code", () => {
  it("keeps multi-line strings (python reward code) as their text, shown as a block", () => {
    const code = "def reward(prompt, response, meta):\n    return 1.0\n";
    expect(flatten({ reward: { type: "python", code } })).toEqual({ "reward.type": '"python"', "reward.code": code });
  });
});

describe("specDiff", () => {
  it("marks only the paths whose values differ, including paths one spec lacks", () => {
    const rows = specDiff([
      { name: "a", training: { lr: 0.001, iterations: 20 }, mode: "sync" },
      { name: "b", training: { lr: 0.0003, iterations: 20 }, mode: "sync", seed: 1 },
    ], ["name"]);
    expect(rows.map((r) => r.path)).toEqual(["mode", "seed", "training.iterations", "training.lr"]);
    expect(rows.filter((r) => r.differs).map((r) => r.path)).toEqual(["seed", "training.lr"]);
    expect(rows.find((r) => r.path === "seed")?.values).toEqual([undefined, "1"]);
  });

  it("compares more than two specs: one outlier makes the row differ", () => {
    const rows = specDiff([{ x: 1 }, { x: 1 }, { x: 2 }]);
    expect(rows).toEqual([{ path: "x", values: ["1", "1", "2"], differs: true }]);
  });
});
