import { describe, expect, it } from "vitest";
import type { SampleRow } from "../api/types";
import { firstDivergence, groupMates, matches, NO_FILTERS, tokenRows, tokenVersion, type SampleTokens } from "./tokenTrace";

const sample = (over: Partial<SampleRow>): SampleRow => ({
  sample_id: "s", iteration: 3, prompt: "p", response: "r", reward: 1, length: 4, policy_version: 2, instance_id: "",
  ...over,
}) as SampleRow;

describe("token trace", () => {
  it("gives each token its version, delta and mask", () => {
    const record = {
      sample_id: "s", iteration: 3, pieces: ["a", "b", "c"], behaviour: [-1, -2, -0.5], current: [-1.5, -2, -0.25],
      versions: [[0, 1], [2, 2]], trained_version: 2, advantage: 0.5, loss_mask: [1, 0, 1], reward: 1,
    } as SampleTokens;
    const rows = tokenRows(record);
    expect(rows.map((r) => r.version)).toEqual([1, 1, 2]);
    expect(rows.map((r) => r.delta)).toEqual([-0.5, 0, 0.25]);
    expect(rows.map((r) => r.trained)).toEqual([true, false, true]);
    expect(tokenVersion([], 5)).toBe(0);
  });

  it("filters by reward, length, version, staleness and mismatch", () => {
    const fresh = sample({ sample_id: "a", iteration: 3, policy_version: 2, reward: 0, mismatch: 0.2 });
    const stale = sample({ sample_id: "b", iteration: 3, policy_version: 1, reward: 1, length: 9 });
    const pick = (f: Partial<typeof NO_FILTERS>) => [fresh, stale].filter((s) => matches(s, { ...NO_FILTERS, ...f })).map((s) => s.sample_id);
    expect(pick({})).toEqual(["a", "b"]);
    expect(pick({ minReward: 0.5 })).toEqual(["b"]);
    expect(pick({ maxLength: 5 })).toEqual(["a"]);
    expect(pick({ version: 1 })).toEqual(["b"]);
    expect(pick({ staleness: "stale" })).toEqual(["b"]);
    expect(pick({ staleness: "on-policy" })).toEqual(["a"]);
    expect(pick({ minMismatch: 0.1 })).toEqual(["a"]);
  });

  it("finds group mates and the first divergence", () => {
    const a = sample({ sample_id: "a" });
    const b = sample({ sample_id: "b" });
    const other = sample({ sample_id: "c", iteration: 4 });
    expect(groupMates([a, b, other], a).map((s) => s.sample_id)).toEqual(["b"]);
    expect(firstDivergence(["1", "+", "2"], ["1", "-", "2"])).toBe(1);
    expect(firstDivergence(["1"], ["1", "2"])).toBe(1);
  });
});
