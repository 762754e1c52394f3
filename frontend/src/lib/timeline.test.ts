import { describe, expect, it } from "vitest";
import { compareLanes, layoutTimeline, pruneSpans, toSeconds } from "./timeline";

describe("layoutTimeline", () => {
  const spans = [
    { lane: "gen-10", kind: "generating", start: 0, end: 5 },
    { lane: "gen-2", kind: "generating", start: 0, end: 8 },
    { lane: "gen-2", kind: "loading_weights", start: 8, end: 9 },
    { lane: "trainer", kind: "idle", start: 0, end: 8 },
    { lane: "trainer", kind: "training", start: 8, end: 10 },
  ];

  it("orders the trainer first, then instances naturally", () => {
    const layout = layoutTimeline(spans, 10);
    expect(layout.lanes.map((l) => l.lane)).toEqual(["trainer", "gen-2", "gen-10"]);
    expect([layout.start, layout.end]).toEqual([0, 10]);
  });

  it("normalises segments to the window and computes the busy share (bubbles)", () => {
    const trainer = layoutTimeline(spans, 10).lanes[0];
    expect(trainer.segments.map((s) => [s.kind, s.x, s.w])).toEqual([
      ["idle", 0, 0.8],
      ["training", 0.8, 0.2],
    ]);
    expect(trainer.busy).toBeCloseTo(0.2);
  });

  it("clips to an explicit window, drops spans outside it and closes open spans at now", () => {
    const layout = layoutTimeline(
      [
        { lane: "gen-0", kind: "generating", start: 0, end: 4 },
        { lane: "gen-0", kind: "idle", start: 4, end: null },
        { lane: "gen-1", kind: "generating", start: 0, end: 1 },
      ],
      12,
      { start: 2, end: 12 },
    );
    expect(layout.lanes.map((l) => l.lane)).toEqual(["gen-0"]);
    expect(layout.lanes[0].segments.map((s) => [s.start, s.end])).toEqual([[2, 4], [4, 12]]);
    expect(layout.lanes[0].segments[1].x + layout.lanes[0].segments[1].w).toBeCloseTo(1);
  });

  it("accepts ISO times and is empty without spans", () => {
    expect(toSeconds("1970-01-01T00:00:10Z")).toBe(10);
    expect(() => toSeconds("soon")).toThrow(/not a time/);
    expect(layoutTimeline([], 5).lanes).toEqual([]);
  });

  it("compares lanes naturally and prunes old closed spans", () => {
    expect(["gen-10", "trainer", "gen-9"].sort(compareLanes)).toEqual(["trainer", "gen-9", "gen-10"]);
    const kept = pruneSpans(
      [
        { lane: "a", kind: "idle", start: 0, end: 1 },
        { lane: "a", kind: "idle", start: 1, end: null },
      ],
      5,
    );
    expect(kept).toHaveLength(1);
  });
});

import { panView, timeTicks, zoomView } from "./timeline";

describe("whole-job view", () => {
  it("zooms around a centre and stays inside the job", () => {
    expect(zoomView({ from: 0, to: 1 }, 0.5)).toEqual({ from: 0.25, to: 0.75 });
    expect(zoomView({ from: 0, to: 1 }, 0.5, 0)).toEqual({ from: 0, to: 0.5 });
    expect(zoomView({ from: 0.25, to: 0.75 }, 4)).toEqual({ from: 0, to: 1 });
  });

  it("pans without leaving [0, 1] or changing the width", () => {
    expect(panView({ from: 0.2, to: 0.4 }, 0.1)).toEqual({ from: 0.30000000000000004, to: 0.5 });
    expect(panView({ from: 0.2, to: 0.4 }, 5)).toEqual({ from: 0.8, to: 1 });
    expect(panView({ from: 0.2, to: 0.4 }, -5)).toEqual({ from: 0, to: 0.2 });
  });

  it("labels evenly spaced ticks with wall-clock time", () => {
    const ticks = timeTicks(1000, 1100, 3);
    expect(ticks.map((t) => [t.t, t.x])).toEqual([[1000, 0], [1050, 0.5], [1100, 1]]);
    expect(ticks[0].label).toMatch(/^\d\d:\d\d:\d\d$/);
    expect(timeTicks(5, 5)).toEqual([]);
  });
});

import { elapsedTicks } from "./timeline";

describe("elapsedTicks", () => {
  it("labels a simulated run from 0 s up, never negative", () => {
    expect(elapsedTicks(1200)).toEqual([
      { x: 0, label: "0 s" }, { x: 0.25, label: "300 s" }, { x: 0.5, label: "600 s" }, { x: 0.75, label: "900 s" }, { x: 1, label: "1200 s" },
    ]);
    expect(elapsedTicks(3, 2).map((t) => t.label)).toEqual(["0.0 s", "3.0 s"]);
    expect(elapsedTicks(0)).toEqual([]);
  });
});
