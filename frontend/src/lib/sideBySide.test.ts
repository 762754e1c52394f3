import { describe, expect, it } from "vitest";
import type { IterationSamples, PromptSamples } from "../api/types";
import { samplesRoute, sideColumns } from "./sideBySide";

const group = (iteration: number): IterationSamples => ({ iteration, checkpoint: iteration === 3, reward_mean: 0.5, samples: [] });

describe("sideColumns", () => {
  it("puts several runs side by side, each with its iterations", () => {
    const result: PromptSamples = { prompt: "p", count: 0, runs: [
      { job_id: 7, name: "b", iterations: [group(2)] },
      { job_id: 3, name: "a", iterations: [group(1), group(3)] },
    ] };
    expect(sideColumns(result).map((c) => [c.key, c.title, c.groups.map((g) => g.iteration)])).toEqual([
      ["7", "b", [2]], ["3", "a", [1, 3]],
    ]);
  });

  it("puts one run's iterations (checkpoints) side by side", () => {
    const result: PromptSamples = { prompt: "p", count: 0, runs: [{ job_id: 3, name: "a", iterations: [group(1), group(3)] }] };
    expect(sideColumns(result).map((c) => c.title)).toEqual(["a · iteration 1", "a · iteration 3"]);
  });
});

describe("samplesRoute", () => {
  it("carries the ids and the prompt, encoded", () => {
    expect(samplesRoute([3, 7])).toBe("/samples?ids=3%2C7");
    expect(new URLSearchParams(samplesRoute([3], "What is 2 + 2?\n").split("?")[1]).get("prompt")).toBe("What is 2 + 2?\n");
  });
});
