import { describe, expect, it } from "vitest";
import type { Run } from "../api/types";
import { compareRoute, formatDuration, parseIds, sortRuns } from "./runs";

const run = (id: number, reward: number | null, healthState: Run["health"]["state"] = "generating"): Run =>
  ({
    id, name: `run-${id}`, status: "running", spec: { mode: "sync", model: "tiny" }, created_at: `2026-01-0${id}T00:00:00Z`,
    latest_metrics: reward === null ? null : { reward_mean: reward }, health: { state: healthState } as Run["health"],
    duration_s: id * 10, eval_reward: null, created_by_email: null,
  }) as unknown as Run;

describe("sortRuns", () => {
  it("sorts by latest reward either way, runs without a reward last", () => {
    const runs = [run(1, 0.2), run(2, null), run(3, 0.9)];
    expect(sortRuns(runs, "reward", true).map((r) => r.id)).toEqual([3, 1, 2]);
    expect(sortRuns(runs, "reward", false).map((r) => r.id)).toEqual([1, 3, 2]);
  });

  it("sorts by health with the most severe first", () => {
    const runs = [run(1, 0, "generating"), run(2, 0, "crash_looping"), run(3, 0, "stalled")];
    expect(sortRuns(runs, "health", false).map((r) => r.id)).toEqual([2, 3, 1]);
  });
});

describe("compare URL", () => {
  it("round-trips ids and drops junk, duplicates and anything past 8", () => {
    expect(parseIds(compareRoute([3, 7]).split("ids=")[1])).toEqual([3, 7]);
    expect(parseIds("3,x,3,-1,4.5,9")).toEqual([3, 9]);
    expect(parseIds("1,2,3,4,5,6,7,8,9,10")).toHaveLength(8);
    expect(parseIds(null)).toEqual([]);
  });
});

describe("formatDuration", () => {
  it("scales the unit with the length", () => {
    expect([formatDuration(42), formatDuration(125), formatDuration(7260), formatDuration(null)]).toEqual(["42s", "2m 05s", "2h 01m", "–"]);
  });
});

import { notesPreview, parseTags, runsQuery } from "./runs";

describe("tags and notes helpers", () => {
  it("splits typed tags on commas and spaces, unique, and names the ones the API refuses", () => {
    expect(parseTags(" sweep, lr:1e-4  best,sweep ")).toEqual({ tags: ["sweep", "lr:1e-4", "best"], bad: [] });
    expect(parseTags('ok "quoted" -lead')).toEqual({ tags: ["ok"], bad: ['"quoted"', "-lead"] });
    expect(parseTags("x".repeat(41)).bad).toHaveLength(1);
    expect(parseTags("   ")).toEqual({ tags: [], bad: [] });
  });

  it("sends only the filters that are set", () => {
    expect(runsQuery({ status: "", tag: " ", q: "" })).toEqual({ status: undefined, tag: undefined, q: undefined, limit: 200 });
    expect(runsQuery({ status: "failed", tag: "sweep", q: " lr " })).toEqual({ status: "failed", tag: "sweep", q: "lr", limit: 200 });
  });

  it("previews the first line of the notes", () => {
    expect(notesPreview("Diverged at 40\nsecond line")).toBe("Diverged at 40");
    expect(notesPreview("x".repeat(100), 10)).toBe("xxxxxxxxx…");
    expect(notesPreview(null)).toBe("");
  });
});
